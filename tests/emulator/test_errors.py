"""Buggy kernels: the right exception, a message with the facts, and a healthy emulator after."""
from __future__ import annotations

import uuid

import numpy as np
import pytest

from emulator_helpers import assert_healthy, kernel, kernel_file
from grader.errors import (
    BarrierError,
    CompileError,
    KernelAssertionError,
    KernelFault,
    KernelRuntimeError,
    KernelTimeoutError,
    LaunchConfigError,
    OutOfBoundsError,
    RaceConditionError,
)

N = 1000


def fails(exc_type, kern, grid, block, args, shared_mem=0, **kw):
    with pytest.raises(exc_type) as info:
        kern.launch(grid, block, args, shared_mem, **kw)
    assert_healthy()
    return info.value


def test_write_past_the_end():
    code = """
    extern "C" __global__ void fill(float* c, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        c[i] = 2.0f * i;
    }
    """
    e = fails(OutOfBoundsError, kernel(code, "fill"), (4, 1, 1), (256, 1, 1), [np.zeros(N, np.float32), np.int32(N)])
    assert str(e).startswith("fill: thread (232,0,0) of block (3,0,0) wrote c[1000] but c has 1000 elements")
    assert "line 4: `c[i] = 2.0f * i;`" in str(e)
    assert (e.kernel, e.block, e.thread, e.line) == ("fill", (3, 0, 0), (232, 0, 0), 4)


def test_read_past_the_end_of_a_2d_array():
    code = """
    extern "C" __global__ void shift(const float* a, float* out, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n)
            out[i] = a[i + 1];
    }
    """
    a = np.zeros((10, 100), np.float32)
    e = fails(OutOfBoundsError, kernel(code, "shift"), (4, 1, 1), (256, 1, 1), [a, np.zeros(N, np.float32), np.int32(N)])
    assert "thread (231,0,0) of block (3,0,0) read a[1000] but a has 1000 elements (shape (10, 100))" in str(e)
    assert e.line == 5


def test_write_before_the_start():
    code = """
    extern "C" __global__ void left(float* c, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) c[i - 1] = 1.0f;
    }
    """
    e = fails(OutOfBoundsError, kernel(code, "left"), (4, 1, 1), (256, 1, 1), [np.zeros(N, np.float32), np.int32(N)])
    assert "thread (0,0,0) of block (0,0,0) wrote c[-1] but c has 1000 elements, so that is before its start" in str(e)
    assert e.line == 4


@pytest.mark.parametrize("n, race_check", [(1024, False), (N, True)])
def test_read_before_the_start(n, race_check):
    code = """
    extern "C" __global__ void stencil(const float* x, float* y, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = x[i - 1] + x[i];
    }
    """
    args = [np.ones(n, np.float32), np.zeros(n, np.float32), np.int32(n)]
    e = fails(OutOfBoundsError, kernel(code, "stencil"), (4, 1, 1), (256, 1, 1), args, race_check=race_check)
    assert f"thread (0,0,0) of block (0,0,0) read x[-1] but x has {n} elements" in str(e)


def test_wild_index_names_the_nearest_array():
    code = """
    extern "C" __global__ void wild(float* c, int n) { c[threadIdx.x * 100000000] = 1.0f; }
    """
    e = fails(OutOfBoundsError, kernel(code, "wild"), (1, 1, 1), (4, 1, 1), [np.zeros(N, np.float32), np.int32(N)])
    assert "thread (1,0,0) of block (0,0,0) wrote address" in str(e)
    assert "which is in no array (the nearest, c, has 1000 elements; this would be index 100000000)" in str(e)


def test_shared_array_overrun_names_the_line():
    code = """
    extern "C" __global__ void overrun(float* out, int k) {
        __shared__ float tile[64];
        tile[threadIdx.x + k] = 1.0f;
        __syncthreads();
        out[threadIdx.x] = tile[threadIdx.x];
    }
    """
    e = fails(OutOfBoundsError, kernel(code, "overrun"), (1, 1, 1), (64, 1, 1), [np.zeros(64, np.float32), np.int32(1)])
    assert "thread (63,0,0) of block (0,0,0) indexed a __shared__ or local array past its declared size" in str(e)
    assert "(line 4: `tile[threadIdx.x + k] = 1.0f;`)" in str(e)


def test_local_array_overrun():
    code = """
    extern "C" __global__ void local(float* out, int k) {
        float acc[4] = {0, 0, 0, 0};
        for (int j = 0; j <= k; ++j) acc[j] += 1.0f;
        out[threadIdx.x] = acc[0] + acc[3];
    }
    """
    e = fails(OutOfBoundsError, kernel(code, "local"), (1, 1, 1), (8, 1, 1), [np.zeros(8, np.float32), np.int32(4)])
    assert "thread (0,0,0) of block (0,0,0)" in str(e) and e.line == 4


def test_dynamic_shared_overrun_and_missing_size():
    code = """
    extern "C" __global__ void dyn(float* out) {
        extern __shared__ float buf[];
        buf[threadIdx.x] = 1.0f;
        __syncthreads();
        out[threadIdx.x] = buf[threadIdx.x];
    }
    """
    kern = kernel(code, "dyn")
    e = fails(OutOfBoundsError, kern, (1, 1, 1), (64, 1, 1), [np.zeros(64, np.float32)], shared_mem=128)
    assert "thread (32,0,0) of block (0,0,0) wrote byte 128 of the dynamic shared memory (extern __shared__), which has 128 bytes" in str(e)
    assert e.line == 4
    e = fails(OutOfBoundsError, kern, (1, 1, 1), (64, 1, 1), [np.zeros(64, np.float32)], shared_mem=0)
    assert "the launch gave it 0 bytes: pass the size in bytes as shared_mem" in str(e)


def test_divergent_syncthreads_after_early_return():
    code = """
    extern "C" __global__ void early(float* x, int n) {
        int i = threadIdx.x;
        if (i >= n) return;
        __syncthreads();
        x[i] = 1.0f;
    }
    """
    e = fails(BarrierError, kernel(code, "early"), (1, 1, 1), (64, 1, 1), [np.zeros(64, np.float32), np.int32(40)])
    msg = str(e)
    assert "early in block (0,0,0): deadlock" in msg
    assert "threads (0,0,0)..(39,0,0) [40 threads] wait at __syncthreads() on line 5" in msg
    assert "threads (40,0,0)..(63,0,0) [24 threads] have finished (returned)" in msg
    assert e.line == 5 and e.block == (0, 0, 0)


def test_syncthreads_at_different_lines():
    code = """
    extern "C" __global__ void branches(float* x) {
        if (threadIdx.x % 2 == 0) {
            x[threadIdx.x] = 1.0f;
            __syncthreads();
        } else {
            __syncthreads();
            x[threadIdx.x] = 2.0f;
        }
    }
    """
    e = fails(BarrierError, kernel(code, "branches"), (1, 1, 1), (4, 1, 1), [np.zeros(4, np.float32)])
    msg = str(e)
    assert "wait at different __syncthreads() calls" in msg
    assert "threads (0,0,0), (2,0,0) [2 threads] wait at __syncthreads() on line 5" in msg
    assert "threads (1,0,0), (3,0,0) [2 threads] wait at __syncthreads() on line 7" in msg


def test_shuffle_deadlock_lanes_returned():
    code = """
    extern "C" __global__ void partial_warp(float* out, int n) {
        if (threadIdx.x >= n) return;
        float v = threadIdx.x;
        v += __shfl_down_sync(0xffffffff, v, 1);
        out[threadIdx.x] = v;
    }
    """
    e = fails(BarrierError, kernel(code, "partial_warp"), (1, 1, 1), (32, 1, 1), [np.zeros(32, np.float32), np.int32(20)])
    assert "__shfl_down_sync(mask 0xffffffff) on line 5" in str(e)
    assert "(20,0,0)..(31,0,0) [12 threads] have finished" in str(e)


def test_full_mask_on_a_partial_warp():
    code = """
    extern "C" __global__ void ragged(float* out) {
        out[threadIdx.x] = __shfl_xor_sync(FULL_MASK, 1.0f, 1);
    }
    """
    e = fails(BarrierError, kernel(code, "ragged"), (1, 1, 1), (48, 1, 1), [np.zeros(48, np.float32)])
    assert "names lane 16, but this warp has only 16 threads" in str(e) and e.line == 3


def test_endless_loop_hits_the_time_limit():
    code = """
    extern "C" __global__ void spin(const int* flag, int* out) {
        int i = 0;
        while (flag[0] == 0) { i++; }
        out[0] = i;
    }
    """
    args = [np.zeros(1, np.int32), np.zeros(1, np.int32)]
    e = fails(KernelTimeoutError, kernel(code, "spin"), (1, 1, 1), (32, 1, 1), args, time_limit=0.3)
    assert str(e).startswith("spin: stopped after 0.3 s of CPU time (")
    assert "its time limit of 0.3 CPU s per launch: an endless loop" in str(e)
    assert "Thread (0,0,0) of block (0,0,0) was running (line 4: `while (flag[0] == 0) { i++; }`)" in str(e)


def test_time_limit_from_the_environment(monkeypatch):
    code = """
    extern "C" __global__ void spin2(const int* flag) { while (flag[0] == 0) {} }
    """
    monkeypatch.setenv("GRADER_TIME_LIMIT", "0.2")
    e = fails(KernelTimeoutError, kernel(code, "spin2"), (1, 1, 1), (1, 1, 1), [np.zeros(1, np.int32)])
    assert "its time limit of 0.2 CPU s" in str(e)


def test_assert_and_printed_output_before_it():
    code = """
    extern "C" __global__ void checked(const int* x, int n) {
        int i = threadIdx.x;
        printf("thread %d sees %d\\n", i, x[i]);
        assert(x[i] < n);
    }
    """
    x = np.array([1, 2, 30, 4], np.int32)
    e = fails(KernelAssertionError, kernel(code, "checked"), (1, 1, 1), (4, 1, 1), [x, np.int32(10)])
    assert "checked: assertion `x[i] < n` failed in thread (2,0,0) of block (0,0,0) (line 5: `assert(x[i] < n);`)" in str(e)
    assert "thread 2 sees 30" in str(e)
    assert e.thread == (2, 0, 0) and e.line == 5


def test_assert_from_an_included_assert_header():
    code = """
    #include <assert.h>
    #include <cassert>
    extern "C" __global__ void checked2(int n) { assert(n > 0); }
    """
    e = fails(KernelAssertionError, kernel(code, "checked2"), (1, 1, 1), (1, 1, 1), [np.int32(0)])
    assert "assertion `n > 0` failed" in str(e) and e.line == 4


def test_trap():
    code = """
    extern "C" __global__ void trapper(int n) {
        if (blockIdx.x == 1 && threadIdx.x == 3) __trap();
    }
    """
    e = fails(KernelAssertionError, kernel(code, "trapper"), (2, 1, 1), (8, 1, 1), [np.int32(0)])
    assert "thread (3,0,0) of block (1,0,0) called __trap() (line 3" in str(e)


@pytest.mark.parametrize("detector", [True, False])
def test_missing_second_syncthreads_is_a_race(rng, monkeypatch, detector):
    from grader.emulator import _toolchain
    if detector and _toolchain.clang() is None:
        pytest.skip("the race detector needs clang-16")
    if not detector:  # without clang: only the comparison of the two schedules' results
        monkeypatch.setattr(_toolchain, "clang", lambda: None)
    m = n = k = 64
    a, b = rng.random((m, k), dtype=np.float32), rng.random((k, n), dtype=np.float32)
    c = np.zeros((m, n), np.float32)
    kern = kernel_file("matmul.cu", "matmul_tiled", ("-DSKIP_SECOND_SYNC",))
    e = fails(RaceConditionError, kern, (4, 4, 1), (16, 16, 1), [a, b, c, np.int32(m), np.int32(n), np.int32(k)],
              race_check=True)
    msg = str(e)
    if detector:
        assert msg.startswith("matmul_tiled: race condition on shared memory (")
        assert "a __syncthreads() is missing between these two accesses" in msg and e.explained
    else:
        # no guess at the cause: what differs, and that the detector is missing
        assert msg.startswith("matmul_tiled: two legal schedules of the same launch")
        assert "C[" in msg and "of shape (64, 64)" in msg and "race check unavailable" in msg
        assert "apt-get install clang-16" in msg and e.explained


def test_stack_overflow():
    code = """
    extern "C" __global__ void big_locals(float* out, int n) {
        volatile float big[100000];
        for (int i = 0; i < n; ++i) big[i] = i;
        out[0] = big[n - 1];
    }
    """
    e = fails(KernelFault, kernel(code, "big_locals"), (1, 1, 1), (2, 1, 1), [np.zeros(1, np.float32), np.int32(100000)])
    assert "overflowed its 256 KiB stack" in str(e) and e.thread is not None


def test_integer_division_by_zero():
    code = """
    extern "C" __global__ void divide(int* out, int d) { out[threadIdx.x] = 100 / (d - (int)threadIdx.x); }
    """
    e = fails(KernelFault, kernel(code, "divide"), (1, 1, 1), (4, 1, 1), [np.zeros(4, np.int32), np.int32(2)])
    assert "thread (2,0,0) of block (0,0,0) divided an integer by zero (line 2" in str(e)


def test_kernel_that_calls_exit():
    code = """
    extern "C" __global__ void quitter(int code) { if (threadIdx.x == 1) exit(code); }
    """
    e = fails(KernelRuntimeError, kernel(code, "quitter"), (1, 1, 1), (2, 1, 1), [np.int32(3)])
    assert "thread (1,0,0) of block (0,0,0) failed: the kernel called exit()" in str(e)


def test_kernel_that_kills_its_process():
    code = """
    #include <signal.h>
    extern "C" __global__ void killer(int sig) { raise(sig); }
    """
    e = fails(KernelRuntimeError, kernel(code, "killer"), (1, 1, 1), (1, 1, 1), [np.int32(9)])
    assert "crashed the emulator's worker process" in str(e)


def test_shared_memory_limits():
    code = """
    extern "C" __global__ void too_big(float* out) {
        __shared__ float a[64 * 200];
        a[threadIdx.x] = 1.0f;
        __syncthreads();
        out[threadIdx.x] = a[threadIdx.x + 1];
    }
    """
    kern = kernel(code, "too_big")
    assert kern.static_shared_bytes == 64 * 200 * 4
    e = fails(LaunchConfigError, kern, (1, 1, 1), (32, 1, 1), [np.zeros(32, np.float32)])
    assert "51200 bytes, over the GPU's 49152 byte limit" in str(e)
    ok = kernel_file("matmul.cu", "matmul_tiled")
    e = fails(LaunchConfigError, ok, (1, 1, 1), (16, 16, 1), [np.zeros(1, np.float32)] * 3 + [np.int32(1)] * 3,
              shared_mem=227 * 1024)
    assert "2048 bytes of static plus 232448 bytes of dynamic shared memory" in str(e)


def test_compile_error_names_the_students_line():
    code = """extern "C" __global__ void broken(float* x, int n) {
    int i = threadIdx.x;
    x[i] = undefined_thing + 1;
    threadIdx.x = 3;
}
"""
    with pytest.raises(CompileError) as info:
        kernel(code, "broken")
    msg = str(info.value).replace("‘", "'").replace("’", "'")
    assert msg.startswith("broken: the g++ compiler rejected the kernel.")
    assert "line 3: error: 'undefined_thing' was not declared in this scope\n      x[i] = undefined_thing + 1;" in msg
    assert "line 4: error: assignment of member 'uint3::x' in read-only object\n      threadIdx.x = 3;" in msg
    assert "emu_" not in msg and "/tmp" not in msg and ".cache" not in msg
    with pytest.raises(CompileError):  # a cached failure fails the same way
        kernel(code, "broken")
    assert_healthy()


def test_compile_error_inside_a_runtime_template_keeps_its_text():
    code = """
    struct Big { double a, b; };
    extern "C" __global__ void wide(double* x) {
        Big v{x[0], x[1]};
        v = __shfl_sync(FULL_MASK, v, 0);
        x[0] = v.a;
    }
    """
    with pytest.raises(CompileError) as info:
        kernel(code, "wide")
    msg = str(info.value)
    assert "line 5" in msg and "warp shuffles move at most 8 bytes" in msg


def test_a_killed_compiler_is_reported_and_not_cached(monkeypatch):
    from grader.emulator import _build
    # A source compiled nowhere else (a fresh token), so neither cache holds it.
    code = f"""// {uuid.uuid4()}
extern "C" __global__ void add_fresh(float* x, int n) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1.0f;
}}
"""
    real_run, calls = _build.subprocess.run, []

    def killed_once(cmd, **kw):
        calls.append(cmd)
        if len(calls) == 1:
            return _build.subprocess.CompletedProcess(cmd, -9, "", "g++: fatal error: Killed signal terminated program cc1plus")
        return real_run(cmd, **kw)

    monkeypatch.setattr(_build.subprocess, "run", killed_once)
    with pytest.raises(CompileError) as info:
        kernel(code, "add_fresh")
    msg = str(info.value)
    assert msg.startswith("add_fresh: the C++ compiler itself failed (exit -9), not on a line of your code")
    assert "Killed signal" in msg
    assert kernel(code, "add_fresh").name == "add_fresh"  # the retry compiles: nothing was cached
    assert_healthy()

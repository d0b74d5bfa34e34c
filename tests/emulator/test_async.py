"""cp.async on the emulator: deferred copies that land at the wait, and each misuse named."""
from __future__ import annotations

import numpy as np
import pytest

from emulator_helpers import KERNELS, assert_healthy, kernel, kernel_file
from grader.emulator import _toolchain
from grader.errors import KernelFault, RaceConditionError

needs_clang = pytest.mark.skipif(_toolchain.clang() is None, reason="the traced build needs clang-16 (apt-get install clang-16)")


def ints(rng, shape):
    """Small integers as floats: every sum of products is exact, so results compare exactly."""
    return rng.integers(-4, 5, shape).astype(np.float32)


def run_matmul(kern, rng, n=64, **kw):
    a, b = ints(rng, (n, n)), ints(rng, (n, n))
    c = np.zeros((n, n), np.float32)
    report = kern.launch((n // 16, n // 16, 1), (16, 16, 1), [a, b, c, np.int32(n)], 0, **kw)
    np.testing.assert_array_equal(c, a @ b)
    return report


def test_double_buffered_matmul_is_exact(rng):
    run_matmul(kernel_file("async_copy.cu", "matmul_async"), rng, race_check=True)


def test_double_buffered_matmul_in_the_normal_build(rng, monkeypatch):
    # Without clang the launch stays on the g++ build, which only defers and poisons.
    monkeypatch.setattr(_toolchain, "clang", lambda: None)
    run_matmul(kernel_file("async_copy.cu", "matmul_async"), rng)


def test_cuda_pipeline_primitives_spelling(rng):
    run_matmul(kernel_file("async_pipeline.cu", "matmul_pipeline"), rng, race_check=True)


PIPELINE_OBJECT = """
#include <cuda_pipeline.h>
extern "C" __global__ void staged(const float* x, float* out) {
    __shared__ __align__(16) float s[8];
    nvcuda::experimental::pipeline pipe;
    if (threadIdx.x == 0) {
        nvcuda::experimental::memcpy_async(*reinterpret_cast<float4*>(s), *reinterpret_cast<const float4*>(x), pipe);
        __pipeline_memcpy_async(s + 4, x + 4, 16, 4);
    }
    pipe.commit();
    pipe.wait_prior<0>();
    __syncthreads();
    out[threadIdx.x] = s[threadIdx.x];
}
"""


def test_cuda_pipeline_object():
    x, out = np.arange(1, 9, dtype=np.float32), np.zeros(8, np.float32)
    kernel(PIPELINE_OBJECT, "staged").launch((1, 1, 1), (8, 1, 1), [x, out], 0, race_check=True)
    np.testing.assert_array_equal(out, [1, 2, 3, 4, 5, 6, 7, 0])


def test_the_same_kernels_build_for_gpus_with_nvrtc():
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc", reason="needs the nvrtc extra: pip install -e '.[nvrtc]'")
    from grader.nvrtc import compile_check

    sources = [(KERNELS / "async_copy.cu").read_text(), (KERNELS / "async_pipeline.cu").read_text(), PIPELINE_OBJECT]
    for source in sources:  # CUDA's own cuda_pipeline.h on the GPU side
        assert set(compile_check(source)) == {"sm_80", "sm_90"}


def test_zero_fill_tail():
    x = np.arange(1, 38, dtype=np.float32)  # 37 floats: 9 full chunks, one of 4 bytes, 6 of none
    out = np.full(64, 7, np.float32)
    kernel_file("async_copy.cu", "copy_tail").launch((1, 1, 1), (16, 1, 1), [x, out, np.int32(37)], 0, race_check=True)
    np.testing.assert_array_equal(out, np.concatenate([x, np.zeros(27, np.float32)]))


def test_pipeline_zfill_counts_from_the_end():
    code = """
    #include <cuda_pipeline_primitives.h>
    extern "C" __global__ void head(const float* x, float* out) {
        __shared__ __align__(16) float s[4];
        __pipeline_memcpy_async(s, x, 16, 12);  // one float from x, three zeros
        __pipeline_commit();
        __pipeline_wait_prior(0);
        out[threadIdx.x] = s[threadIdx.x];
    }
    """
    out = np.full(4, 7, np.float32)
    kernel(code, "head").launch((1, 1, 1), (4, 1, 1), [np.full(4, 5, np.float32), out], 0)
    np.testing.assert_array_equal(out, [5, 0, 0, 0])


def test_four_and_eight_byte_copies():
    x = np.arange(64, dtype=np.float32)
    out = np.zeros(64, np.float32)
    kernel_file("async_copy.cu", "copy_ca").launch((1, 1, 1), (32, 1, 1), [x, out], 0, race_check=True)
    np.testing.assert_array_equal(out, x[::-1])


@needs_clang
def test_io_counts_a_copy_as_a_global_read_and_a_shared_write(rng):
    n, steps = 64, 4
    io = run_matmul(kernel_file("async_copy.cu", "matmul_async"), rng, n=n, count_io=True).io
    # Each block reads its 16-row band of A and 16-column band of B once, through cp.async...
    assert io.per_array["A"] == (n * n * 4 * (n // 16), 0)
    assert io.per_array["B"] == (n * n * 4 * (n // 16), 0)
    assert io.per_array["C"] == (0, n * n * 4)
    # ...which writes exactly those bytes to shared memory; each thread then reads 2 x 16 floats a step.
    assert io.shared_written == io.global_read
    assert io.shared_read == n * n * steps * 2 * 16 * 4


# ----------------------------------------------------------------------------- wrong usage

def fails(exc_type, kern, grid, block, args, **kw):
    with pytest.raises(exc_type) as info:
        kern.launch(grid, block, args, 0, **kw)
    assert_healthy()
    return info.value


def launch_one(code, name, **kw):
    x, out = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
    return fails(KernelFault, kernel(code, name), (1, 1, 1), (32, 1, 1), [x, out], **kw)


READ_BEFORE_WAIT = """
extern "C" __global__ void early(const float* x, float* out) {
    __shared__ __align__(16) float s[128];
    int i = threadIdx.x;
    cp_async_cg16(&s[4 * i], &x[4 * (i % 16)]);
    cp_async_commit();
    out[i] = s[4 * i];
    cp_async_wait<0>();
}
"""


@needs_clang
def test_read_before_the_wait_is_named():
    e = launch_one(READ_BEFORE_WAIT, "early")
    msg = str(e)
    assert ("thread (0,0,0) of block (0,0,0): read of shared memory still in flight from the cp.async on line 5 "
            "(issued by this thread, (0,0,0)); this thread has made no cp_async_wait since issuing it") in msg
    assert "line 7: `out[i] = s[4 * i];`" in msg
    assert e.line == 7


def test_read_before_the_wait_reads_nan_in_the_normal_build(monkeypatch):
    monkeypatch.setattr(_toolchain, "clang", lambda: None)
    x, out = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
    kernel(READ_BEFORE_WAIT, "early").launch((1, 1, 1), (32, 1, 1), [x, out], 0)
    assert np.isnan(out[:32]).all()


@needs_clang
def test_waiting_for_all_but_the_newest_group_when_the_newest_is_needed():
    code = """
    extern "C" __global__ void one_group(const float* x, float* out) {
        __shared__ __align__(16) float s[128];
        int i = threadIdx.x;
        cp_async_cg16(&s[4 * i], &x[4 * (i % 16)]);
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        out[i] = s[4 * i];
    }
    """
    msg = str(launch_one(code, "one_group"))
    assert "read of shared memory still in flight from the cp.async on line 5" in msg
    assert "cp_async_wait<1> on line 7 retires only the groups older than the newest 1" in msg
    assert "(by then the thread had committed 1 group(s), numbered from 0; this copy is in group 0)" in msg
    assert "that wait retired nothing: no more groups had been committed than it may leave pending" in msg
    assert "needs exactly STAGES - 1 groups committed before its loop and one per iteration" in msg
    assert "if no copy is meant to stay in flight here, wait with cp_async_wait<0>()" in msg
    assert "line 9: `out[i] = s[4 * i];`" in msg


@needs_clang
@pytest.mark.parametrize("own_wait", [False, True], ids=["reader-has-not-waited", "reader-waited-for-the-group"])
def test_another_threads_copy_read_before_its_wait(own_wait):
    # Thread 0 reads thread 1's chunk before thread 1 waits. When thread 0 has waited for its own
    # chunk of the same group, what is missing is the barrier after the waits, and the message says so.
    wait = "if (i == 0) cp_async_wait<0>();" if own_wait else ""
    code = f"""
    extern "C" __global__ void neighbour(const float* x, float* out) {{
        __shared__ __align__(16) float s[128];
        int i = threadIdx.x;
        cp_async_cg16(&s[4 * i], &x[4 * (i % 16)]);
        cp_async_commit(); {wait}
        __syncthreads();
        out[i] = s[4 * ((i + 1) % 32)];
        cp_async_wait<0>();
    }}
    """
    msg = str(launch_one(code, "neighbour"))
    assert "thread (0,0,0) of block (0,0,0): read of shared memory still in flight from the cp.async on line 5 " \
           "(issued by thread (1,0,0))" in msg
    assert "bytes another thread copied are readable only after that thread's wait covers the copy and a " \
           "__syncthreads() follows it" in msg
    assert ("while this thread's own wait (line 6) covers the same group" in msg) == own_wait


@needs_clang
def test_a_refill_into_the_stage_being_read_is_told_from_a_missing_wait():
    # Two stages; each iteration waits, then refills with tile j + 1 -- into stage j % 2, the one it
    # reads next: the thread has waited before, so the story is the stage index, not a missing wait.
    code = """
    extern "C" __global__ void refill(const float* x, float* out) {
        __shared__ __align__(16) float s[2][128];
        int i = threadIdx.x;
        cp_async_cg16(&s[0][4 * i], &x[4 * (i % 16)]);
        cp_async_commit();
        for (int j = 0; j < 3; ++j) {
            cp_async_wait<0>();
            __syncthreads();
            cp_async_cg16(&s[j % 2][4 * i], &x[4 * (i % 16)]);
            cp_async_commit();
            out[i] += s[j % 2][4 * i];
        }
        cp_async_wait<0>();
    }
    """
    msg = str(launch_one(code, "refill"))
    assert "this thread issued it after its last cp_async_wait (line 8) and has not waited since" in msg
    assert "it went into bytes that are being read now" in msg and "(j + STAGES - 1) % STAGES" in msg
    assert "line 12: `out[i] += s[j % 2][4 * i];`" in msg


@needs_clang
def test_a_stray_read_into_another_threads_newer_copy_is_not_blamed_on_the_barrier():
    # Thread 1 has waited for group 0 and synchronised; it then reads past its tile, into the
    # bytes thread 0 is refilling with group 1: the address strays, no barrier is missing.
    code = """
    extern "C" __global__ void stray(const float* x, float* out) {
        __shared__ __align__(16) float s[2][128];
        int i = threadIdx.x;
        cp_async_cg16(&s[0][4 * i], &x[4 * (i % 16)]);
        cp_async_commit();
        cp_async_wait<0>();
        __syncthreads();
        if (i == 0) cp_async_cg16(&s[1][0], &x[0]);
        cp_async_commit();
        __syncthreads();
        const float* flat = &s[0][0];
        if (i == 1) out[i] = flat[128 * i];
        __syncthreads();
        cp_async_wait<0>();
    }
    """
    msg = str(launch_one(code, "stray"))
    assert "thread (0,0,0) issued it after that thread's last cp_async_wait (line 7)" in msg
    assert "its address strays out of that tile into a buffer being refilled" in msg


def test_misaligned_copy():
    code = """
    extern "C" __global__ void skew(const float* x, float* out) {
        __shared__ __align__(16) float s[132];
        cp_async_cg16(&s[4 * threadIdx.x + 1], &x[0]);
        cp_async_wait_all();
    }
    """
    msg = str(launch_one(code, "skew"))
    assert "is not a multiple of 16 bytes; a 16-byte cp.async needs both addresses aligned to 16 bytes" in msg
    assert "line 4: `cp_async_cg16(&s[4 * threadIdx.x + 1], &x[0]);`" in msg


def test_misaligned_source():
    code = """
    extern "C" __global__ void skew_src(const float* x, float* out) {
        __shared__ __align__(16) float s[4];
        cp_async_ca<8>(&s[0], &x[1]);
        cp_async_wait_all();
    }
    """
    msg = str(launch_one(code, "skew_src"))
    assert "source 0x" in msg and "byte 4 of the array passed as parameter 0 (counting from 0), is not a multiple of 8 bytes from the array's start" in msg


def test_destination_in_global_memory():
    code = """
    extern "C" __global__ void to_global(const float* x, float* out) {
        cp_async_cg16(&out[4 * threadIdx.x], &x[4 * threadIdx.x]);
        cp_async_wait_all();
    }
    """
    msg = str(launch_one(code, "to_global"))
    assert "cp.async: destination 0x" in msg
    assert "is not in shared memory: it points into an array argument, global memory (cp.async copies global -> shared)" in msg


def test_source_outside_every_array():
    code = """
    extern "C" __global__ void wild(const float* x, float* out) {
        __shared__ __align__(16) float s[4];
        cp_async_cg16(s, x + (1 << 20));
        cp_async_wait_all();
    }
    """
    msg = str(launch_one(code, "wild"))
    assert "is in no array argument of the launch; cp.async reads global memory" in msg


def test_source_past_the_end_suggests_zero_fill():
    code = """
    extern "C" __global__ void tail(const float* x, float* out) {
        __shared__ __align__(16) float s[4];
        cp_async_cg16(s, x + 60);
        cp_async_wait_all();
    }
    """
    x, out = np.arange(62, dtype=np.float32), np.zeros(64, np.float32)
    msg = str(fails(KernelFault, kernel(code, "tail"), (1, 1, 1), (32, 1, 1), [x, out]))
    assert ("reads 16 bytes from byte 240 of the array passed as parameter 0 (counting from 0), which has 248 bytes: "
            "past its end") in msg
    assert "cp_async_cg16_zfill" in msg


def test_two_copies_in_flight_to_the_same_bytes():
    code = """
    extern "C" __global__ void twice(const float* x, float* out) {
        __shared__ __align__(16) float s[4];
        if (threadIdx.x == 1) cp_async_cg16(s, x + 4);
        __syncthreads();
        if (threadIdx.x == 0) cp_async_cg16(s, x);
        cp_async_wait_all();
    }
    """
    msg = str(launch_one(code, "twice"))
    assert "thread (0,0,0) of block (0,0,0): cp.async: destination 0x" in msg
    assert "is still the destination of the cp.async on line 4 (thread (1,0,0)), in flight" in msg


@needs_clang
@pytest.mark.parametrize("syncwarp, write_line", [(True, 7), (False, 6)], ids=["after-the-wait", "before-the-issue"])
def test_copy_read_by_another_thread_without_syncthreads_is_a_race(syncwarp, write_line):
    # Thread 0 copies and waits; thread 63 reads the copy with no __syncthreads() in between. The
    # race run goes in reverse thread order. Held up by its warp's __syncwarp(), thread 63 reads
    # after thread 0's wait: the copy's write is booked at the wait (line 7). Without it, thread 63
    # reads before thread 0 even issues the copy: the write is checked at the issue too (line 6),
    # since on a GPU the bytes may land any time from the issue on.
    sync = "__syncwarp();" if syncwarp else ""
    code = f"""
    extern "C" __global__ void peek(const float* x, float* out) {{
        __shared__ __align__(16) float s[4];
        int i = threadIdx.x;
        if (i == 0) {{
            cp_async_cg16(s, x);
            cp_async_wait_all();
        }}
        if (i >= 32) {{
            {sync}
            if (i == 63) out[0] = s[0];
        }}
    }}
    """
    x, out = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
    e = fails(RaceConditionError, kernel(code, "peek"), (1, 1, 1), (64, 1, 1), [x, out], race_check=True)
    msg = str(e)
    assert f"thread (0,0,0) of block (0,0,0) writes it (line {write_line}:" in msg
    assert "thread (63,0,0) of block (0,0,0) reads it (line 11:" in msg
    assert "a __syncthreads() is missing" in msg


def test_wait_with_an_open_group_retires_nothing_of_it(monkeypatch):
    # wait<0> without a commit: the copy's group is still open, so nothing lands (poison read).
    monkeypatch.setattr(_toolchain, "clang", lambda: None)
    code = """
    extern "C" __global__ void open_group(const float* x, float* out) {
        __shared__ __align__(16) float s[4];
        if (threadIdx.x == 0) {
            cp_async_cg16(s, x);
            cp_async_wait<0>();
            out[0] = s[0];
            cp_async_wait_all();
            out[1] = s[0];
        }
    }
    """
    x, out = np.full(64, 3, np.float32), np.zeros(64, np.float32)
    kernel(code, "open_group").launch((1, 1, 1), (32, 1, 1), [x, out], 0)
    assert np.isnan(out[0]) and out[1] == 3

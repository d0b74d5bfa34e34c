"""The machinery: source rewrites, options, back ends, cache, worker isolation, threads."""
from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

from emulator_helpers import VECTOR_ADD, assert_healthy, kernel
from grader import emulator
from grader.emulator import _build
from grader.errors import BackendUnavailableError, OutOfBoundsError
from grader.signature import parse_signature


def test_translation_unit_numbers_the_students_lines_from_one():
    tu = emulator.translation_unit("int x;\n")
    assert tu == '#include "course.cuh"\n#line 1 "kernel.cu"\nint x;\n'
    assert _build.student_code(tu) == "int x;\n"


def test_rewrite_keeps_every_line_in_place():
    code = (
        'extern "C" __global__ void k(float* x) {\n'
        "    extern __shared__ float s[];\n"
        "    x[0] = s[0]; // extern \"C\" in a comment stays\n"
        "}\n"
        'extern "C"\n{\n__global__ void j() {}\n}\n'
    )
    out = _build.rewrite(code)
    assert out.count("\n") == code.count("\n")
    assert 'extern "C" __global__' not in out and "inline namespace emu_c {" in out
    assert "float* const s = reinterpret_cast<float*>(emu_ctx.dyn_smem);" in out
    assert '// extern "C" in a comment stays' in out


def test_rewrite_namespace_scope_extern_shared_restores_line_numbers():
    code = "#line 1 \"kernel.cu\"\nint a;\nextern __shared__ double buf[]; int b;\nint c;\n"
    out = _build.rewrite(code)
    assert "#define buf (reinterpret_cast<double*>(emu_ctx.dyn_smem))\n#line 2\n int b;" in out  # line 2 continues


def test_options_parsing():
    defines, includes = _build.parse_options(
        ["-DA=1", "-D", "B", "--define-macro", "C=3", "--define-macro=D", "-I/x", "--include-path=/y",
         "-std=c++17", "--use_fast_math", "-arch=sm_90", "-lineinfo"])
    assert defines == ["-DA=1", "-DB", "-DC=3", "-DD"]
    assert includes == ["-I/x", "-I/y"]


def test_available_and_fiber_backend(monkeypatch):
    ok, info = emulator.available()
    assert ok and "g++" in info
    monkeypatch.setenv("GRADER_EMULATOR_FIBERS", "ucontext")
    assert emulator.fiber_backend() == "ucontext"
    monkeypatch.setenv("GRADER_EMULATOR_FIBERS", "threads")
    with pytest.raises(BackendUnavailableError, match="choose 'boost' or 'ucontext'"):
        emulator.fiber_backend()
    monkeypatch.delenv("GRADER_EMULATOR_FIBERS")
    assert emulator.fiber_backend() in ("boost", "ucontext")


def test_null_pointer_write_is_contained():
    code = """
    extern "C" __global__ void null_write(int* x, int n) {
        int* p = n > 0 ? nullptr : x;
        p[threadIdx.x] = 1;
    }
    """
    pid = os.getpid()
    with pytest.raises(OutOfBoundsError, match=r"thread \(0,0,0\) of block \(0,0,0\) wrote through a null"):
        kernel(code, "null_write").launch((1, 1, 1), (4, 1, 1), [np.zeros(4, np.int32), np.int32(1)], 0)
    assert os.getpid() == pid
    assert_healthy()


def test_a_write_into_a_const_array_comes_back():
    # The checks compare every input with its original after the launch, so a write through a
    # cast pointer must be visible, as it is on a GPU.
    code = """
    extern "C" __global__ void sneaky(const float* a, float* b) {
        const_cast<float*>(a)[threadIdx.x] = 9.0f;
        b[threadIdx.x] = a[threadIdx.x];
    }
    """
    a, b = np.zeros(4, np.float32), np.zeros(4, np.float32)
    kernel(code, "sneaky").launch((1, 1, 1), (4, 1, 1), [a, b], 0)
    assert a.tolist() == [9] * 4 and b.tolist() == [9] * 4


def test_launches_from_many_python_threads():
    kern = kernel(VECTOR_ADD, "vector_add")
    errors = []

    def work(seed):
        rng = np.random.default_rng(seed)
        try:
            for _ in range(10):
                n = int(rng.integers(1, 5000))
                a, b = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
                c = np.zeros(n, np.float32)
                kern.launch(((n + 255) // 256, 1, 1), (256, 1, 1), [a, b, c, np.int32(n)], 0)
                np.testing.assert_array_equal(c, a + b)
        except Exception as e:  # noqa: BLE001 - collected and re-raised below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_large_arrays_grow_the_shared_file(rng):
    code = """
    extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
        for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
            y[i] = a * x[i] + y[i];
    }
    """
    n = 6 << 20  # 24 MiB per array: more than the initial shared file holds
    x, y = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    expected = np.float32(3) * x + y
    kernel(code, "saxpy").launch((8, 1, 1), (256, 1, 1), [np.float32(3), x, y, np.int32(n)], 0)
    np.testing.assert_array_equal(y, expected)


def test_cache_makes_a_second_compile_cheap(tmp_path, monkeypatch, fibers):
    if fibers != "boost":
        pytest.skip("the cache does not depend on the fiber back end")
    monkeypatch.setenv("GRADER_CACHE_DIR", str(tmp_path))
    code = VECTOR_ADD + "// cache test\n"
    src = emulator.translation_unit(code)
    sig = parse_signature(src, "vector_add")
    emulator.compile_kernel(src, "vector_add", sig)
    assert list(tmp_path.glob("kernels/*/*/lib.so"))
    t = time.perf_counter()
    emulator.compile_kernel(src, "vector_add", sig)
    assert time.perf_counter() - t < 0.05

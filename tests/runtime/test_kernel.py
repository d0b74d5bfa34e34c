"""grader.RawKernel on every available backend: launches, argument checks, compile errors."""
import re

import numpy as np
import pytest

import grader

VADD = r'''
extern "C" __global__ void vadd(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
'''

PRELUDE_USER = r'''
extern "C" __global__ void prelude_user(float* out, int n) {
    // INFINITY, NAN and ceil_div come from the course prelude on both backends
    int i = threadIdx.x;
    if (i == 0) out[0] = -INFINITY;
    if (i == 1) out[1] = (float)ceil_div(n, 4);
    if (i == 2) out[2] = isnan(NAN) ? 1.0f : 0.0f;
}
'''


def test_vector_add_matches_numpy(backend, rng):
    n = 1000
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    da, db, dc = grader.to_device(a), grader.to_device(b), grader.empty(n)
    k = grader.RawKernel(VADD, "vadd")
    assert k.backend == backend
    k(grader.ceil_div(n, 256), 256, (da, db, dc, np.int32(n)))
    np.testing.assert_allclose(grader.to_host(dc), a + b, rtol=1e-6)


def test_prelude_gives_one_spelling_everywhere(backend):
    out = grader.empty(3)
    grader.RawKernel(PRELUDE_USER, "prelude_user")(1, 32, (out, np.int32(9)))
    assert grader.to_host(out).tolist() == [-np.inf, 3.0, 1.0]


def test_wrong_scalar_type_is_refused_before_launch(backend):
    k = grader.RawKernel(VADD, "vadd")
    x = grader.empty(4)
    with pytest.raises(grader.KernelArgumentError, match=r"Wrap it: np.int32\(4\)"):
        k(1, 32, (x, x, x, 4))


def test_host_array_on_gpu_is_explained(backend):
    if backend != "gpu":
        pytest.skip("on the emulator, NumPy arrays are device arrays")
    k = grader.RawKernel(VADD, "vadd")
    host = np.zeros(4, np.float32)
    with pytest.raises(grader.KernelArgumentError, match="grader.to_device"):
        k(1, 32, (host, host, host, np.int32(4)))


def test_compile_error_names_the_students_line(backend):
    bad = 'extern "C" __global__ void broken(float* x) {\n    x[0] = 1.0f\n    x[1] = y;\n}\n'
    with pytest.raises(grader.CompileError) as err:
        grader.RawKernel(bad, "broken").compile()
    text = str(err.value)
    assert text.startswith("broken: the") and "compiler rejected the kernel" in text
    # g++ blames line 2 (the missing ';'), NVRTC the line after it; both quote that line
    m = re.search(r"line ([23]): error:.*\n\s+(.*)", text)
    assert m, text
    assert m.group(2) == bad.splitlines()[int(m.group(1)) - 1].strip()
    assert "/tmp" not in text and "emu_" not in text and "course.cuh" not in text


def test_missing_extern_c_and_unknown_name(backend):
    with pytest.raises(grader.KernelSourceError, match='extern "C"'):
        grader.RawKernel("__global__ void f(float* x) {}", "f")
    with pytest.raises(grader.KernelNotFoundError, match="defines: vadd"):
        grader.RawKernel(VADD, "vector_add")


def test_launch_limits_are_checked_before_compiling(backend):
    k = grader.RawKernel(VADD, "vadd")
    x = grader.empty(4)
    with pytest.raises(grader.LaunchConfigError, match="1056 threads"):
        k(1, (32, 33), (x, x, x, np.int32(4)))
    assert k._compiled is None


def test_emulator_only_options_are_refused_on_gpu(backend):
    if backend != "gpu":
        pytest.skip("GPU-only behaviour")
    k = grader.RawKernel(VADD, "vadd")
    x = grader.empty(4)
    with pytest.raises(grader.BackendUnavailableError, match="emulator features"):
        k(1, 32, (x, x, x, np.int32(4)), race_check=True)


def test_defines_reach_the_kernel(backend):
    src = 'extern "C" __global__ void tiled(int* out) { out[threadIdx.x] = TILE; }'
    out = grader.empty(2, np.int32)
    grader.RawKernel(src, "tiled", options=("-DTILE=7",))(1, 2, (out,))
    assert grader.to_host(out).tolist() == [7, 7]


def test_dynamic_shared_memory_over_48k_needs_opt_in(backend):
    src = r'''
    extern "C" __global__ void big(float* out) {
        extern __shared__ float buf[];
        buf[threadIdx.x] = threadIdx.x;
        __syncthreads();
        out[threadIdx.x] = buf[31 - threadIdx.x] + buf[12287];
    }'''
    k = grader.RawKernel(src, "big")
    out = grader.empty(32)
    with pytest.raises(grader.LaunchConfigError, match="max_dynamic_shared_size_bytes = 65536"):
        k(1, 32, (out,), shared_mem=65536)
    k.max_dynamic_shared_size_bytes = 65536
    out_src = r'''
    extern "C" __global__ void big2(float* out) {
        extern __shared__ float buf[];
        for (int i = threadIdx.x; i < 16384; i += blockDim.x) buf[i] = i;
        __syncthreads();
        out[threadIdx.x] = buf[16383 - threadIdx.x];
    }'''
    k2 = grader.RawKernel(out_src, "big2")
    k2.max_dynamic_shared_size_bytes = 65536
    k2(1, 32, (out,), shared_mem=65536)
    assert grader.to_host(out).tolist() == [16383.0 - i for i in range(32)]

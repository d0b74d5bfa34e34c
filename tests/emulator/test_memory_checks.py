"""Alignment, exact array bounds for aligned (vector) kernels, and the bounds handler's detail."""
from __future__ import annotations

import numpy as np
import pytest

from grader.emulator import _toolchain, alignment_sensitive
from grader.errors import KernelFault, OutOfBoundsError

from emulator_helpers import kernel

needs_clang = pytest.mark.skipif(_toolchain.clang() is None, reason="the traced build needs clang-16")

# A float4 copy with a scalar tail: correct for any n.
COPY4 = r"""
extern "C" __global__ void copy4(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int whole = n / 4;
    if (i < whole) reinterpret_cast<float4*>(y)[i] = reinterpret_cast<const float4*>(x)[i];
    if (i == whole) for (int j = 4 * whole; j < n; ++j) y[j] = x[j];
}
"""

# The tail forgotten: the last float4 reaches past the end when n is not a multiple of 4.
COPY4_NO_TAIL = r"""
extern "C" __global__ void copy4(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (4 * i < n) reinterpret_cast<float4*>(y)[i] = reinterpret_cast<const float4*>(x)[i];
}
"""

MISALIGNED = r"""
extern "C" __global__ void shifted(const float* x, float* y, int n) {
    int i = threadIdx.x;
    float4 v = reinterpret_cast<const float4*>(x + 1)[i];
    y[i] = v.x;
}
"""


@pytest.mark.parametrize("n", [127, 128, 5])
def test_vector_copy_with_tail_is_exact(n):
    x = np.arange(n, dtype=np.float32)
    y = np.zeros(n, np.float32)
    kernel(COPY4, "copy4").launch((1, 1, 1), (64, 1, 1), [x, y, np.int32(n)], 0)
    np.testing.assert_array_equal(y, x)


def test_misaligned_vector_load_is_named():
    x = np.zeros(64, np.float32)
    y = np.zeros(32, np.float32)
    with pytest.raises(KernelFault) as e:
        kernel(MISALIGNED, "shifted").launch((1, 1, 1), (4, 1, 1), [x, y, np.int32(64)], 0)
    msg = str(e.value)
    assert "misaligned address" in msg and "float4" in msg and "multiple of 16 bytes" in msg
    assert "line 4" in msg and e.value.thread == (0, 0, 0)


def test_vector_write_past_the_end_is_caught_by_the_canary():
    x = np.zeros(128, np.float32)
    y = np.zeros(126, np.float32)
    with pytest.raises(OutOfBoundsError, match=r"wrote past the end of y"):
        kernel(COPY4_NO_TAIL, "copy4").launch((1, 1, 1), (32, 1, 1), [x, y, np.int32(126)], 0)


@needs_clang
def test_vector_read_past_the_end_is_exact_in_the_traced_build():
    x = np.zeros(126, np.float32)
    y = np.zeros(128, np.float32)
    with pytest.raises(OutOfBoundsError) as e:
        kernel(COPY4_NO_TAIL, "copy4").launch((1, 1, 1), (32, 1, 1), [x, y, np.int32(126)], 0, count_io=True)
    assert "read x[124] but x has 126 elements" in str(e.value)


def test_shared_overrun_names_index_and_array_type():
    src = r"""
extern "C" __global__ void over(const float* x, float* y, int n) {
    __shared__ float t[32];
    int i = threadIdx.x;
    t[i + n] = x[i];
    __syncthreads();
    y[i] = t[i];
}
"""
    x = np.zeros(32, np.float32)
    y = np.zeros(32, np.float32)
    with pytest.raises(OutOfBoundsError) as e:
        kernel(src, "over").launch((1, 1, 1), (32, 1, 1), [x, y, np.int32(1)], 0)
    assert "index 32 into 'float [32]'" in str(e.value) and "line 5" in str(e.value)


def test_which_kernels_get_aligned_arrays():
    assert alignment_sensitive(COPY4)
    assert alignment_sensitive("__global__ void k(__half2* h) {}")
    assert not alignment_sensitive("__global__ void k(float* x) { x[threadIdx.x] = 1.0f; }")

"""Helpers for the emulator tests: compile once per session, check the worker is healthy."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from grader import emulator
from grader.signature import parse_signature

KERNELS = Path(__file__).parent / "kernels"


_COMPILED: dict = {}


def kernel(code: str, name: str, options=()) -> emulator.EmulatedKernel:
    """Compile once per test session (the on-disk cache makes later sessions cheap too)."""
    key = (code, name, tuple(options))
    if key not in _COMPILED:
        src = emulator.translation_unit(code)
        _COMPILED[key] = emulator.compile_kernel(src, name, parse_signature(src, name), tuple(options))
    return _COMPILED[key]


def kernel_file(filename: str, name: str, options=()) -> emulator.EmulatedKernel:
    return kernel((KERNELS / filename).read_text(), name, options)


VECTOR_ADD = """
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
"""


def assert_healthy() -> None:
    """After a failed launch, the next normal launch works."""
    n = 1000
    a = np.arange(n, dtype=np.float32)
    b = np.full(n, 2, np.float32)
    c = np.zeros(n, np.float32)
    kernel(VECTOR_ADD, "vector_add").launch((4, 1, 1), (256, 1, 1), [a, b, c, np.int32(n)], 0)
    np.testing.assert_array_equal(c, a + b)

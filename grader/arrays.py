"""Array helpers so one notebook runs on both backends.

On the GPU, kernel arguments are CuPy arrays in device memory; on the emulator they are NumPy
arrays. ``empty`` poisons memory (NaN for floats, all bits set for integers) so that an output
element no thread wrote stands out instead of looking like a plausible zero.
"""
from __future__ import annotations

import numpy as np

from .backend import backend


def array_module():
    """``cupy`` on the GPU backend, ``numpy`` on the CPU emulator."""
    if backend() == "gpu":
        import cupy

        return cupy
    return np


def is_device_array(x, on: str | None = None) -> bool:
    """Whether ``x`` can be passed to a kernel on backend ``on`` (default: the active one)."""
    if (on or backend()) == "gpu":
        import cupy

        return isinstance(x, cupy.ndarray)
    return isinstance(x, np.ndarray)


def to_device(x, dtype=None):
    """Copy ``x`` (NumPy array, list, scalar) to the active backend as a C-contiguous array."""
    if dtype is None and not hasattr(x, "dtype"):
        dtype = np.float32
    if backend() == "gpu":
        import cupy

        return cupy.ascontiguousarray(cupy.asarray(x, dtype=dtype))
    host = to_host(x) if not isinstance(x, np.ndarray) and hasattr(x, "get") else x
    return np.array(host, dtype=dtype, order="C", copy=True)


def to_host(x) -> np.ndarray:
    """A NumPy copy of ``x`` (from a CuPy array, or as is)."""
    if hasattr(x, "get") and not isinstance(x, np.ndarray):
        return x.get()
    return np.array(x, copy=True)


def poison_value(dtype) -> object:
    dt = np.dtype(dtype)
    if dt.kind == "f" or dt.name == "bfloat16":
        return np.nan
    if dt.kind == "b":
        return True
    return np.iinfo(dt).max if dt.kind == "u" else -1  # all bits set


def empty(shape, dtype=np.float32):
    """An uninitialised-looking array: NaN for floats, all bits set for integers."""
    xp = array_module()
    return xp.full(shape, poison_value(dtype), dtype=dtype)


def zeros(shape, dtype=np.float32):
    return array_module().zeros(shape, dtype=dtype)

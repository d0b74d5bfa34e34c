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


# Floats are filled with a quiet NaN whose payload no arithmetic produces, so a check can tell
# "never written" from "computed a NaN". Integers get all bits set.
POISON_BITS = {"float16": 0x7E5B, "bfloat16": 0x7FDB, "float32": 0x7FC0BAD5, "float64": 0x7FF80000BAD0BAD5}
_UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}


# NumPy has no bfloat16: an array of it is its bits, uint16 (what CuPy and the emulator take for a
# __nv_bfloat16* parameter), and exercises name the type "bfloat16" to say how to read them.
BF16 = "bfloat16"


def storage_dtype(dtype) -> np.dtype:
    return np.dtype(np.uint16) if dtype == BF16 else np.dtype(dtype)


def bf16_values(bits: np.ndarray) -> np.ndarray:
    """float32 values of bfloat16 bits (exact: a bfloat16 is the top half of a float32)."""
    return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32)


def bf16_bits(x32) -> np.ndarray:
    """float32 -> bfloat16 bits (uint16), rounded to nearest even (NaN stays NaN)."""
    b = np.asarray(x32, np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x32), np.uint16(0x7FFF), rounded)


def poison_host(shape, dtype) -> np.ndarray:
    if dtype == BF16:
        return np.full(shape, POISON_BITS[BF16], dtype=np.uint16)
    dt = np.dtype(dtype)
    if dt.name in POISON_BITS:
        return np.full(shape, POISON_BITS[dt.name], dtype=_UINT[dt.itemsize]).view(dt)
    return np.full(shape, 0xFF, dtype=np.uint8).view(dt) if dt.itemsize == 1 else np.full(
        shape, np.iinfo(_UINT[dt.itemsize]).max, dtype=_UINT[dt.itemsize]).view(dt)


def never_written(x, dtype=None) -> np.ndarray:
    """Boolean mask of elements that still hold the poison of :func:`empty` (``dtype`` "bfloat16"
    reads uint16 storage as bfloat16)."""
    host = to_host(x)
    name = BF16 if dtype == BF16 else host.dtype.name
    if name not in POISON_BITS:
        return np.zeros(host.shape, dtype=bool)
    return host.view(_UINT[host.dtype.itemsize]) == POISON_BITS[name]


def empty(shape, dtype=np.float32):
    """An uninitialised-looking array: marked NaN for floats, all bits set for integers."""
    host = poison_host(shape, dtype)
    if backend() == "gpu":
        import cupy

        return cupy.asarray(host)
    return host


def zeros(shape, dtype=np.float32):
    return array_module().zeros(shape, dtype=storage_dtype(dtype))

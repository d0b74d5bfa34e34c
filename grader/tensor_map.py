"""TMA tensor maps: what a kernel's ``const CUtensorMap*`` parameter receives.

``TensorMap(array, box, swizzle)`` describes a 1- to 5-dimensional C-contiguous array and the box
one ``tma_load_Nd`` / ``tma_store_Nd`` moves. Sizes and coordinates count innermost first, as the
PTX instruction's coordinates do: for a (rows, cols) matrix, ``box=(64, 128)`` is 128 rows of 64
columns and ``tma_load_2d(dst, map, col, row, bar)`` starts it at (row, col). Passed in a kernel's
arguments, it becomes 128 bytes in global memory (CuPy passes no 128-byte struct by value, so the
kernel takes a pointer): on a GPU, the driver's own encoding (``cuTensorMapEncodeTiled``, through
ctypes: CuPy has no binding); on the emulator, the same description in the emulator's layout,
with the array itself travelling as one more argument of the launch, so that every box is
bounds-checked against it and the bytes it moves are counted.
"""
from __future__ import annotations

import struct

import numpy as np

from .errors import KernelArgumentError

SWIZZLES = (0, 32, 64, 128)
# CUtensorMapDataType by element size (the bytes move unchanged, so unsigned types serve every dtype)
_DRIVER_DTYPE = {1: 0, 2: 1, 4: 2, 8: 4}
_DRIVER_SWIZZLE = {0: 0, 32: 1, 64: 2, 128: 3}
EMULATOR_MAGIC = 0x50414D54  # "TMAP"
# magic, rank, element bytes, swizzle, argument index, then dims[5] (u64), strides[5] (u64, bytes), box[5] (u32)
_EMULATOR_LAYOUT = struct.Struct("<6I5Q5Q5I")


class TensorMap:
    def __init__(self, array, box, swizzle: int = 0):
        shape, itemsize = tuple(array.shape), int(array.dtype.itemsize)
        box = tuple(int(b) for b in box)
        rank = len(shape)
        where = f"TensorMap(array of shape {shape}, box={box}, swizzle={swizzle})"
        if not 1 <= rank <= 5:
            raise KernelArgumentError(f"{where}: a tensor map has 1 to 5 dimensions")
        if len(box) != rank:
            raise KernelArgumentError(f"{where}: the box needs one size per dimension of the array ({rank}), innermost first")
        if not array.flags.c_contiguous:
            raise KernelArgumentError(f"{where}: the array must be C-contiguous")
        if itemsize not in _DRIVER_DTYPE:
            raise KernelArgumentError(f"{where}: elements of 1, 2, 4 or 8 bytes")
        if swizzle not in SWIZZLES:
            raise KernelArgumentError(f"{where}: the swizzle is 0, 32, 64 or 128 bytes")
        if any(not 1 <= b <= 256 for b in box):
            raise KernelArgumentError(f"{where}: each box size is 1..256 elements")
        inner = box[0] * itemsize
        if inner % 16:
            raise KernelArgumentError(f"{where}: the box's rows ({box[0]} elements, {inner} bytes) must be a multiple of 16 bytes")
        if swizzle and inner != swizzle:
            raise KernelArgumentError(
                f"{where}: with a {swizzle}-byte swizzle, the box's rows are {swizzle} bytes ({swizzle // itemsize} "
                f"elements), one swizzle row each; these are {inner}")
        self.array, self.box, self.swizzle = array, box, swizzle
        self.dims = shape[::-1]  # innermost first
        self.strides = tuple(int(np.prod(shape[rank - d:], dtype=np.int64)) * itemsize for d in range(rank))  # bytes
        self.itemsize = itemsize
        if any(s % 16 for s in self.strides[1:]):
            raise KernelArgumentError(f"{where}: the byte strides of the outer dimensions, {self.strides[1:]}, must be "
                                      "multiples of 16 (the innermost size times the element size a multiple of 16)")

    @property
    def box_bytes(self) -> int:
        """The bytes one copy moves (an out-of-bounds part counts too: it arrives as zeros)."""
        return int(np.prod(self.box)) * self.itemsize

    def emulator_bytes(self, arg_index: int) -> np.ndarray:
        """The emulator's 128 bytes: the array is argument ``arg_index`` of the launch."""
        pad = lambda v, fill: (*v, *(fill,) * (5 - len(v)))  # noqa: E731
        raw = _EMULATOR_LAYOUT.pack(EMULATOR_MAGIC, len(self.dims), self.itemsize, self.swizzle, arg_index, 0,
                                    *pad(self.dims, 1), *pad(self.strides, 0), *pad(self.box, 1))
        return np.frombuffer(raw.ljust(128, b"\0"), np.uint8).copy()

    def gpu_bytes(self):
        """The driver's 128 bytes, on the device (cuTensorMapEncodeTiled; tile mode, no interleave,
        L2 promotion 128 bytes, out-of-bounds elements filled with zeros)."""
        import ctypes

        import cupy

        encode = ctypes.CDLL("libcuda.so.1").cuTensorMapEncodeTiled
        encode.restype = ctypes.c_int
        rank = len(self.dims)
        out = (ctypes.c_ubyte * 128)()
        rc = encode(ctypes.byref(out), ctypes.c_int(_DRIVER_DTYPE[self.itemsize]), ctypes.c_uint32(rank),
                    ctypes.c_void_p(self.array.data.ptr), (ctypes.c_uint64 * rank)(*self.dims),
                    (ctypes.c_uint64 * max(rank - 1, 1))(*(self.strides[1:] or (0,))),
                    (ctypes.c_uint32 * rank)(*self.box), (ctypes.c_uint32 * rank)(*(1,) * rank), ctypes.c_int(0),
                    ctypes.c_int(_DRIVER_SWIZZLE[self.swizzle]), ctypes.c_int(2), ctypes.c_int(0))
        if rc:
            raise KernelArgumentError(f"cuTensorMapEncodeTiled refused the tensor map (CUresult {rc}): dims "
                                      f"{self.dims}, box {self.box}, swizzle {self.swizzle}")
        return cupy.asarray(np.frombuffer(bytes(out), np.uint8))


def expand(args, backend: str) -> tuple[list, list]:
    """``args`` with each TensorMap replaced by its 128 bytes, and the arrays the emulator appends
    to the launch (its maps name them by argument index); on a GPU none are appended."""
    if not isinstance(args, (tuple, list)) or not any(isinstance(a, TensorMap) for a in args):
        return args, []
    out, extra = [], []
    for a in args:
        if not isinstance(a, TensorMap):
            out.append(a)
        elif backend == "gpu":
            out.append(a.gpu_bytes())
        else:
            out.append(a.emulator_bytes(len(args) + len(extra)))
            extra.append(a.array)
    return out, extra

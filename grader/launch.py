"""Launch-configuration rules shared by both backends: the limits of a current NVIDIA GPU
(compute capability 8.x/9.x), checked before anything runs so mistakes get a sentence, not a
CUDA error code."""
from __future__ import annotations

import numbers

from .errors import LaunchConfigError

MAX_THREADS_PER_BLOCK = 1024
MAX_BLOCK_DIM = (1024, 1024, 64)
MAX_GRID_DIM = (2**31 - 1, 65535, 65535)
DEFAULT_SHARED_BYTES = 48 * 1024  # static limit, and dynamic limit without opting in
MAX_SHARED_BYTES_OPTIN = 227 * 1024  # H100 per-block maximum with the opt-in attribute


def ceil_div(n: int, b: int) -> int:
    """Blocks of size ``b`` needed to cover ``n`` items (the same as the prelude's ceil_div)."""
    return -(-int(n) // int(b))


def dims(value, what: str, kernel: str) -> tuple[int, int, int]:
    """Normalise an int or a 1-3 tuple to (x, y, z), refusing floats, zeros and negatives."""
    items = value if isinstance(value, (tuple, list)) else (value,)
    if not 1 <= len(items) <= 3:
        raise LaunchConfigError(f"{kernel}: {what} must be an int or a tuple of 1-3 ints, got {value!r}")
    out = []
    for v in items:
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            hint = " Use ceil_div(n, threads) (grader.ceil_div in Python) to round up." if isinstance(v, float) else ""
            raise LaunchConfigError(f"{kernel}: {what} {value!r} contains {v!r}, which is not a whole number.{hint}")
        if v < 1:
            raise LaunchConfigError(f"{kernel}: {what} {value!r} has a dimension of {v}; every dimension must be at least 1 (is the problem size 0?)")
        out.append(int(v))
    return tuple(out + [1] * (3 - len(out)))


def check_launch(kernel: str, grid, block, shared_mem, max_dynamic_shared: int):
    g = dims(grid, "grid", kernel)
    b = dims(block, "block", kernel)
    for axis, (v, limit) in enumerate(zip(b, MAX_BLOCK_DIM)):
        if v > limit:
            raise LaunchConfigError(f"{kernel}: block{b} has {v} threads along {'xyz'[axis]}, over the limit of {limit}")
    threads = b[0] * b[1] * b[2]
    if threads > MAX_THREADS_PER_BLOCK:
        raise LaunchConfigError(
            f"{kernel}: block{b} has {threads} threads; a block holds at most {MAX_THREADS_PER_BLOCK}. "
            "Use more blocks with fewer threads each."
        )
    for axis, (v, limit) in enumerate(zip(g, MAX_GRID_DIM)):
        if v > limit:
            raise LaunchConfigError(f"{kernel}: grid{g} has {v} blocks along {'xyz'[axis]}, over the limit of {limit}")
    if isinstance(shared_mem, bool) or not isinstance(shared_mem, numbers.Integral) or shared_mem < 0:
        raise LaunchConfigError(f"{kernel}: shared_mem must be a non-negative int (bytes), got {shared_mem!r}")
    if shared_mem > max_dynamic_shared:
        if shared_mem > MAX_SHARED_BYTES_OPTIN:
            raise LaunchConfigError(
                f"{kernel}: shared_mem={shared_mem} bytes is over the {MAX_SHARED_BYTES_OPTIN} bytes "
                "(227 KB) a block can have on an H100. Use smaller tiles."
            )
        raise LaunchConfigError(
            f"{kernel}: shared_mem={shared_mem} bytes is over the {max_dynamic_shared} bytes allowed "
            f"without opting in. Set kernel.max_dynamic_shared_size_bytes = {shared_mem} first "
            "(as with CuPy), or use smaller tiles."
        )
    return g, b, int(shared_mem)

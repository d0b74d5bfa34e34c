"""Launch-configuration rules shared by both backends: the H100's limits (grader.device), checked
before anything runs so mistakes get a sentence, not a
CUDA error code."""
from __future__ import annotations

import numbers

from .device import H100_SXM
from .errors import LaunchConfigError


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
    for axis, (v, limit) in enumerate(zip(b, H100_SXM.max_block_dim)):
        if v > limit:
            raise LaunchConfigError(f"{kernel}: block{b} has {v} threads along {'xyz'[axis]}, over the limit of {limit}")
    threads = b[0] * b[1] * b[2]
    if threads > H100_SXM.max_threads_per_block:
        raise LaunchConfigError(
            f"{kernel}: block{b} has {threads} threads; a block holds at most {H100_SXM.max_threads_per_block}. "
            "Use more blocks with fewer threads each."
        )
    for axis, (v, limit) in enumerate(zip(g, H100_SXM.max_grid_dim)):
        if v > limit:
            raise LaunchConfigError(f"{kernel}: grid{g} has {v} blocks along {'xyz'[axis]}, over the limit of {limit}")
    if isinstance(shared_mem, bool) or not isinstance(shared_mem, numbers.Integral) or shared_mem < 0:
        raise LaunchConfigError(f"{kernel}: shared_mem must be a non-negative int (bytes), got {shared_mem!r}")
    if shared_mem > max_dynamic_shared:
        if shared_mem > H100_SXM.max_shared_per_block_optin:
            raise LaunchConfigError(
                f"{kernel}: shared_mem={shared_mem} bytes is over the {H100_SXM.max_shared_per_block_optin} bytes "
                "(227 KB) a block can have on an H100. Use smaller tiles."
            )
        raise LaunchConfigError(
            f"{kernel}: shared_mem={shared_mem} bytes is over the {max_dynamic_shared} bytes allowed "
            f"without opting in. Set kernel.max_dynamic_shared_size_bytes = {shared_mem} first "
            "(as with CuPy), or use smaller tiles."
        )
    return g, b, int(shared_mem)

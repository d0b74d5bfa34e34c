"""Inputs and exact expected outputs for the Hopper kernels in this folder.

Shared by the emulator tests (tests/emulator/test_hopper_*.py) and by the GPU run that checks the
same kernels on an H100/H200, bit for bit (benchmarks/hopper_primitives_gpu.py). Every input is a
small integer, so each product and sum is exact in fp32: any correct implementation gives exactly
``expected``. ``Case.args`` are fresh arrays for one launch (outputs zero-filled); 16-bit inputs are
uint16 bit patterns (half or bfloat16).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent

# An operand's layout in shared memory: K- or MN-major ("K", "M") and the swizzle in bytes;
# "R": A from registers (the RS form).
LAYOUTS = ("K0", "K32", "K64", "K128", "M0", "M32", "M64", "M128")


@dataclass
class Case:
    id: str
    source: str  # CUDA C, without the course prelude
    kernel: str
    grid: tuple
    block: tuple
    args: list
    expected: dict = field(default_factory=dict)  # argument index -> exact expected array
    shared_mem: int = 0  # dynamic shared memory, bytes


def bits16(x: np.ndarray, bf16: bool) -> np.ndarray:
    """16-bit patterns of small integers (exact in half and bfloat16)."""
    if bf16:
        return (np.asarray(x, np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return np.asarray(x, np.float16).view(np.uint16)


def wgmma_shapes() -> list[tuple[int, str, str, str]]:
    """(N, type, A layout, B layout) of every wgmma kernel: all N with 128-byte K-major tiles, every
    layout of A and of B at N = 64, the RS form with three B layouts, and bfloat16."""
    shapes = [(n, "f16", "K128", "K128") for n in range(8, 257, 8)]
    shapes += [(64, "f16", a, "K128") for a in LAYOUTS if a != "K128"]
    shapes += [(64, "f16", "K128", b) for b in LAYOUTS if b != "K128"]
    shapes += [(n, "f16", "R", b) for n in (8, 64, 256) for b in ("K128", "M128", "K0")]
    shapes += [(128, "bf16", "M64", "M32"), (32, "bf16", "R", "K64"), (256, "bf16", "K128", "K128")]
    return shapes


def wgmma_name(n: int, dtype: str, a: str, b: str) -> str:
    return f"wg_{dtype}_{n}_{a}_{b}"


def _mode(layout: str) -> tuple[int, int]:
    return (2, 0) if layout == "R" else (int(layout[0] == "M"), int(layout[1:]))


def wgmma_source() -> str:
    """wgmma.cu with one kernel per shape."""
    lines = []
    for n, dtype, a, b in wgmma_shapes():
        am, asw = _mode(a)
        bm, bsw = _mode(b)
        name = wgmma_name(n, dtype, a, b)
        lines += [f"TILE({name}, {n}, {dtype}, {am}, {asw}, {bm}, {bsw})",
                  f'extern "C" __global__ void {name}(const unsigned short* A, const unsigned short* B, float* C) '
                  f"{{ {name}_body(A, B, C); }}"]
    lines.append('extern "C" __global__ void wg_matmul(const unsigned short* A, const unsigned short* B, float* C) '
                 "{ matmul_body(A, B, C); }")
    return (HERE / "wgmma.cu").read_text() + "\n".join(lines) + "\n"


def wgmma_case(n: int, dtype: str, a: str, b: str, source: str, seed: int = 0) -> Case:
    rng = np.random.default_rng(seed + n)
    x = rng.integers(-3, 4, (64, 64)).astype(np.float32)
    y = rng.integers(-3, 4, (64, n)).astype(np.float32)
    bf16 = dtype == "bf16"
    return Case(wgmma_name(n, dtype, a, b), source, wgmma_name(n, dtype, a, b), (1, 1, 1), (128, 1, 1),
                [bits16(x, bf16), bits16(y, bf16), np.zeros((64, n), np.float32)], {2: x @ y},
                shared_mem=1024 + (64 + max(n, 64)) * 64 * 2)  # the tiles from a multiple of 1024 bytes; an MN-major
                # swizzled B takes whole 128-byte rows


def matmul_case(m: int, source: str) -> Case:
    """wgmma.cu's matmul: C (m x 128) = A (m x 64) * B (64 x 128), 4 warpgroups per 256 rows."""
    rng = np.random.default_rng(m)
    x = rng.integers(-3, 4, (m, 64)).astype(np.float32)
    y = rng.integers(-3, 4, (64, 128)).astype(np.float32)
    return Case(f"wg_matmul_{m}", source, "wg_matmul", (m // 256, 1, 1), (512, 1, 1),
                [bits16(x, False), bits16(y, False), np.zeros((m, 128), np.float32)], {2: x @ y},
                shared_mem=1024 + 128 * 64 * 2 + 4 * 64 * 32)


def mbarrier_cases() -> list[Case]:
    source = (HERE / "mbarrier.cu").read_text()
    t = np.arange(128)
    x = np.arange(7 * 96, dtype=np.float32) % 13
    return [
        Case("mbarrier_phases", source, "phases", (1, 1, 1), (128, 1, 1), [np.zeros(128, np.float32)],
             {0: (((t + 1) % 128) * sum(range(1, 6))).astype(np.float32)}),
        Case("mbarrier_ring", source, "ring", (1, 1, 1), (128, 1, 1), [x, np.zeros(96, np.float32)],
             {1: (x.reshape(7, 96) * np.arange(1, 8, dtype=np.float32)[:, None]).sum(0)}),
        Case("mbarrier_time_limit", source, "time_limit", (1, 1, 1), (1, 1, 1), [np.zeros(2, np.float32)],
             {0: np.array([1, 2], np.float32)}),
    ]


def box_image(array: np.ndarray, box: tuple, coords: tuple, swizzle: int) -> np.ndarray:
    """The bytes a TMA load of ``box`` at ``coords`` (both innermost first) leaves in shared memory
    from a 1024-byte boundary: the box densely, innermost first, zeros out of bounds, then each
    16-byte unit moved by the swizzle (its index in its 128-byte row XOR the row's index in its
    8-row pattern)."""
    shape = array.shape[::-1]
    flat = np.zeros(int(np.prod(box)), array.dtype)
    for e, index in enumerate(np.ndindex(*box[::-1])):  # the innermost index fastest
        g = [c + i for c, i in zip(coords, index[::-1])]
        if all(0 <= v < n for v, n in zip(g, shape)):
            flat[e] = array[tuple(g[::-1])]
    units = flat.view(np.uint8).reshape(-1, 16)
    if not swizzle:
        return units.reshape(-1).copy()
    bits = {32: 1, 64: 3, 128: 7}[swizzle]
    out = np.empty_like(units)
    for u in range(len(units)):
        out[u ^ (u >> 3 & bits)] = units[u]
    return out.reshape(-1)


# (array shape, dtype, box, coordinates, swizzle) of each single-box load: every rank, tails past
# the end (and before the start) of every dimension, each swizzle.
TMA_BOXES = [
    ((40,), np.float32, (16,), (32,), 0),
    ((100, 72), np.uint16, (16, 8), (-8, 95), 0),
    ((100, 72), np.uint16, (16, 8), (64, 0), 32),
    ((100, 72), np.uint16, (32, 8), (48, 96), 64),
    ((100, 72), np.uint16, (64, 8), (40, 3), 128),
    ((5, 6, 8), np.uint16, (8, 4, 3), (0, 4, 3), 0),
    ((3, 4, 5, 8), np.float32, (8, 2, 2, 2), (0, 4, 3, 2), 0),
    ((2, 2, 3, 4, 16), np.uint8, (16, 2, 2, 2, 1), (0, 3, 2, 1, 1), 0),
]


@dataclass
class MapArg:
    """A tensor-map argument: grader.TensorMap(array, box, swizzle) of the backend's copy of
    ``array``, which after the launch must equal ``expected`` (when given)."""
    array: np.ndarray
    box: tuple
    swizzle: int
    expected: np.ndarray | None = None


def tma_cases() -> list[tuple[Case, dict]]:
    """(case, {argument index: MapArg}) for the TMA kernels: the case's args hold None where a
    tensor map goes."""
    source = (HERE / "tma.cu").read_text()
    out = []
    for k, (shape, dtype, box, coords, swizzle) in enumerate(TMA_BOXES):
        x = (np.arange(int(np.prod(shape))) % 251 + 1).astype(dtype).reshape(shape)
        image = box_image(x, box, coords, swizzle)
        c5 = (*coords, *(0,) * (5 - len(coords)))
        case = Case(f"tma_load_{len(shape)}d_{'x'.join(map(str, box))}_sw{swizzle}_{k}", source, "load_box",
                    (1, 1, 1), (128, 1, 1),
                    [None, np.zeros(image.size, np.uint8), np.int32(len(shape)), *(np.int32(c) for c in c5),
                     np.int32(image.size)], {1: image}, shared_mem=1024 + image.size)
        out.append((case, {0: MapArg(x, box, swizzle)}))
    a = (np.arange(100 * 72) % 65521).astype(np.uint16).reshape(100, 72)
    images = np.concatenate([box_image(a, (64, 32), (64 * bx, 32 * by), 128) for by in range(4) for bx in range(2)])
    case = Case("tma_copy_tiles_2d_64x32_sw128", source, "copy_tiles", (2, 4, 1), (128, 1, 1),
                [None, None, np.zeros(images.size, np.uint8), np.int32(64), np.int32(32), np.int32(64 * 32 * 2)],
                {2: images}, shared_mem=1024 + 64 * 32 * 2)
    out.append((case, {0: MapArg(a, (64, 32), 128), 1: MapArg(np.zeros_like(a), (64, 32), 128, expected=a)}))
    return out


def run_tma(case: Case, maps: dict, launch, to_device, to_host) -> list[str]:
    """Launch a TMA case (``launch(args)`` runs the kernel) with tensor maps of ``to_device``'s
    arrays; the names of the outputs that differ from what the case expects, bit for bit."""
    import grader

    args = [to_device(a) if isinstance(a, np.ndarray) else a for a in case.args]
    arrays = {i: to_device(m.array.copy()) for i, m in maps.items()}
    for i, m in maps.items():
        args[i] = grader.TensorMap(arrays[i], m.box, m.swizzle)
    launch(args)
    wrong = [f"argument {i}" for i, want in case.expected.items()
             if not np.array_equal(to_host(args[i]).view(np.uint8), np.ascontiguousarray(want).view(np.uint8))]
    wrong += [f"the array of tensor map {i}" for i, m in maps.items() if m.expected is not None
              and not np.array_equal(to_host(arrays[i]).view(np.uint8), m.expected.view(np.uint8))]
    return wrong


def roles_cases() -> list[Case]:
    """setmaxnreg, elect_one_sync and stmatrix (roles.cu)."""
    source = (HERE / "roles.cu").read_text()
    tile = np.arange(256, dtype=np.float32)
    transposed = tile.reshape(4, 8, 8).transpose(0, 2, 1).reshape(-1).copy()
    return [
        Case("roles_setmaxnreg_elect", source, "roles", (1, 1, 1), (256, 1, 1), [np.zeros(16, np.float32)],
             {0: np.array([0] * 8 + [1] * 8, np.float32)}),
        Case("stmatrix_x4", source, "stmatrix_tile", (1, 1, 1), (32, 1, 1), [np.zeros(256, np.float32), np.int32(0)],
             {0: tile}),
        Case("stmatrix_x4_trans", source, "stmatrix_tile", (1, 1, 1), (32, 1, 1), [np.zeros(256, np.float32), np.int32(1)],
             {0: transposed}),
    ]


def cases() -> list[Case]:
    """Every case but the TMA ones (tma_cases), as the GPU run takes them."""
    source = wgmma_source()
    return [*(wgmma_case(*shape, source) for shape in wgmma_shapes()), matmul_case(1024, source), *mbarrier_cases(),
            *roles_cases()]

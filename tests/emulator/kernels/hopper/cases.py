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


def cases() -> list[Case]:
    """Every case, as the GPU run takes them."""
    source = wgmma_source()
    return [*(wgmma_case(*shape, source) for shape in wgmma_shapes()), matmul_case(1024, source), *mbarrier_cases()]

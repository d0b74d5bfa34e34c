"""Inputs and exact expected outputs for the tensor-core kernels in this folder.

Shared by the emulator tests (tests/emulator/test_tensor_primitives.py) and by a GPU run that
checks the same kernels on real hardware, bit for bit: every input is a small multiple of a power
of two, so each product and sum is exact in fp32 and every correct implementation gives exactly
``expected``. Use::

    for case in cases():
        source = case.source()          # CUDA C, without the course prelude
        ... launch case.kernel with case.grid, case.block, case.args ...
        for index, want in case.expected.items():
            assert np.array_equal(case.args[index], want)

``case.args`` are fresh arrays for one launch (outputs zero-filled); NumPy float16 for half,
uint16 bits for bfloat16, int32 scalars as np.int32.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
try:
    from grader import fragments
except ImportError:  # run from a bare checkout: the repository root holds grader/
    sys.path.insert(0, str(HERE.parents[3]))
    from grader import fragments


@dataclass
class Case:
    id: str
    file: str
    kernel: str
    grid: tuple
    block: tuple
    args: list
    expected: dict = field(default_factory=dict)  # argument index -> exact expected array

    def source(self) -> str:
        return (HERE / self.file).read_text()


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns of values bfloat16 holds exactly (the top half of the float32)."""
    bits = np.asarray(x, np.float32).view(np.uint32)
    assert not np.any(bits & 0xFFFF), "value not exact in bfloat16"
    return (bits >> 16).astype(np.uint16)


def _values(rng, shape, lo=-16, hi=16, scale=0.25):
    """Small multiples of ``scale``: exact in half and bfloat16, products exact in float."""
    return (rng.integers(lo, hi + 1, size=shape) * scale).astype(np.float32)


def _bits(x: np.ndarray, bf16: bool) -> np.ndarray:
    return bf16_bits(x) if bf16 else x.astype(np.float16).view(np.uint16)


def _wmma_input(x: np.ndarray, bf16: bool) -> np.ndarray:
    return bf16_bits(x) if bf16 else x.astype(np.float16)


def mma_cases(rng) -> list[Case]:
    out = []
    for k in (16, 8):
        for bf16 in (False, True):
            a, b, c = _values(rng, (16, k)), _values(rng, (k, 8)), _values(rng, (16, 8), -64, 64, 0.5)
            d = np.zeros((16, 8), np.float32)
            name = f"mma_k{k}_{'bf16' if bf16 else 'f16'}"
            out.append(Case(name, "mma.cu", name, (1, 1, 1), (32, 1, 1),
                            [_bits(a, bf16), _bits(b, bf16), c, d],
                            {3: (a.astype(np.float64) @ b + c).astype(np.float32)}))
    return out


LDMATRIX_VARIANTS = ["x1", "x2", "x4", "x1_trans", "x2_trans", "x4_trans"]


def ldmatrix_expected(rows: np.ndarray, count: int, trans: bool) -> np.ndarray:
    """What each lane's registers hold: rows[8m + j] is row j of matrix m (8 uint16 values)."""
    out = np.zeros((32, 4), np.uint32)
    for lane in range(32):
        for m in range(count):
            halves = []
            for h in range(2):
                row, col = fragments.ldmatrix_element(lane, h, trans)
                halves.append(int(rows[fragments.ldmatrix_address_lane(m, row), col]))
            out[lane, m] = halves[0] | halves[1] << 16
    return out


def ldmatrix_cases(rng) -> list[Case]:
    out = []
    for variant, name in enumerate(LDMATRIX_VARIANTS):
        rows = rng.integers(0, 1 << 16, size=(32, 8), dtype=np.uint16)
        count = 1 << (variant % 3)
        out.append(Case(f"ldmatrix_{name}", "ldmatrix.cu", "ldmatrix_variants", (1, 1, 1), (32, 1, 1),
                        [rows, np.zeros((32, 4), np.uint32), np.int32(variant)],
                        {1: ldmatrix_expected(rows, count, name.endswith("trans"))}))
    return out


def matmul_case(rng, m=64, n=64, k=64) -> Case:
    a, b = _values(rng, (m, k), -8, 8), _values(rng, (k, n), -8, 8)
    return Case(f"matmul_mma_{m}x{n}x{k}", "matmul_mma.cu", "matmul_mma", (n // 64, m // 64, 1), (128, 1, 1),
                [a.astype(np.float16), b.astype(np.float16), np.zeros((m, n), np.float32),
                 np.int32(m), np.int32(n), np.int32(k)],
                {2: (a.astype(np.float64) @ b).astype(np.float32)})


def _stored(x: np.ndarray, col_major: bool, ld: int) -> np.ndarray:
    """x (rows x cols) in a buffer with leading dimension ld, padding filled with junk."""
    rows, cols = x.shape
    outer, inner = (cols, rows) if col_major else (rows, cols)
    buf = np.full((outer, ld), 99.0, np.float32)
    buf[:, :inner] = x.T if col_major else x
    return buf


def wmma_case(rng, dtype: str, a_col: bool, b_col: bool, c_col: bool, m=64, n=32, k=48) -> Case:
    bf16 = dtype == "bf16"
    a, b = _values(rng, (m, k), -8, 8), _values(rng, (k, n), -8, 8)
    c0 = _values(rng, (m, n), -64, 64, 0.5)
    lda, ldb, ldc = (m if a_col else k) + 8, (k if b_col else n) + 16, (m if c_col else n) + 4
    a_buf, b_buf = _stored(a, a_col, lda), _stored(b, b_col, ldb)
    c_buf = _stored(c0, c_col, ldc)
    want = _stored((a.astype(np.float64) @ b + c0).astype(np.float32), c_col, ldc)
    want[:, (m if c_col else n):] = 0  # store_matrix_sync writes the tiles only
    name = f"wmma_{dtype}_{'col' if a_col else 'row'}_{'col' if b_col else 'row'}_{'col' if c_col else 'row'}"
    return Case(name, "wmma.cu", f"wmma_{dtype}", (n // 32, m // 32, 1), (128, 1, 1),
                [_wmma_input(a_buf, bf16), _wmma_input(b_buf, bf16), c_buf, np.zeros_like(c_buf), np.int32(k), np.int32(lda),
                 np.int32(ldb), np.int32(ldc), np.int32(a_col), np.int32(b_col), np.int32(c_col)],
                {3: want})


def wmma_cases(rng) -> list[Case]:
    return [wmma_case(rng, dtype, a_col, b_col, c_col)
            for dtype in ("f16", "bf16") for a_col in (False, True) for b_col in (False, True)
            for c_col in (False, True)]


def cases(seed: int = 0) -> list[Case]:
    rng = np.random.default_rng(seed)
    return [*mma_cases(rng), *ldmatrix_cases(rng), matmul_case(rng), *wmma_cases(rng)]

"""Tensor-core primitives on the emulator: mma.sync, ldmatrix and WMMA give exact results in the
PTX ISA's layouts, and their misuse is reported with the line."""
from __future__ import annotations

import sys
import time

import numpy as np
import pytest

from emulator_helpers import KERNELS, assert_healthy, kernel
from grader import fragments
from grader.errors import BarrierError, KernelFault, RaceConditionError

sys.path.insert(0, str(KERNELS / "tensor"))
import cases  # noqa: E402

ALL = cases.cases()


def launch(case: cases.Case, **kw):
    return kernel(case.source(), case.kernel).launch(case.grid, case.block, case.args, 0, **kw)


# ----------------------------------------------------------------------------- fragments.py

def _grid(shape):
    """lane, then the other indices, broadcast: NumPy arrays over the whole index space."""
    return np.meshgrid(*[np.arange(n) for n in shape], indexing="ij")


def _table(fn, shape):
    rows, cols = np.zeros(shape, int), np.zeros(shape, int)
    for idx in np.ndindex(*shape):
        rows[idx], cols[idx] = fn(*idx)
    return rows, cols


def _covers_once(rows, cols, height, width):
    seen = np.zeros((height, width), int)
    np.add.at(seen, (rows.ravel(), cols.ravel()), 1)
    return np.all(seen == 1)


def test_fragment_tables_follow_the_ptx_formulas():
    # The PTX ISA numbers a lane's elements a0, a1, ... (two per register, lower half first);
    # its formulas, vectorised, against fragments.py's per-register description.
    lane, i = _grid((32, 8))
    g, t = lane >> 2, lane % 4
    rows, cols = _table(lambda ln, e: fragments.a_element(16, ln, e // 2, e % 2), (32, 8))
    np.testing.assert_array_equal(rows, np.where((i < 2) | ((i >= 4) & (i < 6)), g, g + 8))
    np.testing.assert_array_equal(cols, 2 * t + (i & 1) + np.where(i >= 4, 8, 0))
    assert _covers_once(rows, cols, 16, 16)

    lane, i = _grid((32, 4))
    g, t = lane >> 2, lane % 4
    rows, cols = _table(lambda ln, e: fragments.a_element(8, ln, e // 2, e % 2), (32, 4))
    np.testing.assert_array_equal(rows, np.where(i < 2, g, g + 8))
    np.testing.assert_array_equal(cols, 2 * t + (i & 1))
    assert _covers_once(rows, cols, 16, 8)

    rows, cols = _table(lambda ln, e: fragments.b_element(16, ln, e // 2, e % 2), (32, 4))
    np.testing.assert_array_equal(rows, 2 * t + (i & 1) + np.where(i >= 2, 8, 0))
    np.testing.assert_array_equal(cols, g)
    assert _covers_once(rows, cols, 16, 8)

    rows, cols = _table(fragments.c_element, (32, 4))
    np.testing.assert_array_equal(rows, np.where(i < 2, g, g + 8))
    np.testing.assert_array_equal(cols, 2 * t + (i & 1))
    assert _covers_once(rows, cols, 16, 8)

    lane, i = _grid((32, 2))
    rows, cols = _table(lambda ln, e: fragments.b_element(8, ln, 0, e), (32, 2))
    np.testing.assert_array_equal(rows, 2 * (lane % 4) + i)
    np.testing.assert_array_equal(cols, lane >> 2)
    assert _covers_once(rows, cols, 8, 8)


def test_ldmatrix_table_is_the_8x8_fragment_and_its_transpose():
    # Non-transposed: the four lanes of a quad hold one row, left to right; transposed: the same
    # positions of the transposed matrix.
    order = np.array([fragments.ldmatrix_element(ln, h, False) for ln in range(32) for h in range(2)])
    np.testing.assert_array_equal(order[:, 0] * 8 + order[:, 1], np.arange(64))
    order_t = np.array([fragments.ldmatrix_element(ln, h, True) for ln in range(32) for h in range(2)])
    np.testing.assert_array_equal(order_t, order[:, ::-1])
    # Loading A's quadrants (top-left, bottom-left, top-right, bottom-right) with x4 is exactly
    # the A fragment of m16n8k16: the reason ldmatrix exists.
    for lane in range(32):
        for reg in range(4):
            for h in range(2):
                r, c = fragments.ldmatrix_element(lane, h, False)
                assert fragments.a_element(16, lane, reg, h) == (r + 8 * (reg % 2), c + 8 * (reg // 2))


def test_wmma_tables_cover_each_tile_once():
    for use in ("matrix_a", "matrix_b", "accumulator"):
        rows, cols = _table(lambda ln, e: fragments.wmma_element(use, ln, e), (32, 8))
        assert _covers_once(rows, cols, 16, 16), use


def test_generated_header_is_up_to_date():
    assert fragments.HEADER.read_text() == fragments.header_text(), \
        "emu_fragments.hpp is stale: run python -m grader.fragments"


# ----------------------------------------------------------------------------- exact results

@pytest.mark.parametrize("case", ALL, ids=[c.id for c in ALL])
def test_exact_result(case):
    launch(case)
    for index, want in case.expected.items():
        np.testing.assert_array_equal(case.args[index], want)


def test_mma_accumulates_exactly_then_rounds_once():
    # The emulator's numerics (a GPU may differ here): C + 16 products of 2^-24 is 1 + 2^-20 when
    # summed exactly, but 1 if each product were added to a float in turn.
    case = next(c for c in cases.cases() if c.id == "mma_k16_f16")
    a = np.full((16, 16), 2.0 ** -12, np.float32)
    b = np.full((16, 8), 2.0 ** -12, np.float32)
    c = np.full((16, 8), 1.0, np.float32)
    case.args[:3] = [a.astype(np.float16).view(np.uint16), b.astype(np.float16).view(np.uint16), c]
    launch(case)
    np.testing.assert_array_equal(case.args[3], np.float32(1 + 2.0 ** -20))


def test_matmul_io_and_race_check():
    case = cases.matmul_case(np.random.default_rng(1))
    report = launch(case, count_io=True, race_check=True)
    np.testing.assert_array_equal(case.args[2], case.expected[2])
    # Per warp and 16-wide k step: one ldmatrix_x4 for A and four for B, 32 lanes x 16 bytes each.
    assert report.io.shared_read == 4 * 4 * 5 * 32 * 16
    assert report.io.shared_written == 2 * 64 * 64 * 2


def test_ldmatrix_without_barrier_is_a_race():
    code = """
    extern "C" __global__ void early(const unsigned short* in, unsigned* out) {
        __shared__ __align__(16) unsigned short tile[64 * 8];
        for (int i = threadIdx.x; i < 64 * 8; i += blockDim.x) tile[i] = in[i];
        unsigned r[4];
        ldmatrix_x4(r, &tile[(threadIdx.x % 32 + 32 * (threadIdx.x / 32)) * 8]);
        for (int m = 0; m < 4; ++m) out[threadIdx.x * 4 + m] = r[m];
    }
    """
    args = [np.arange(512, dtype=np.uint16), np.zeros(256, np.uint32)]
    with pytest.raises(RaceConditionError):
        kernel(code, "early").launch((1, 1, 1), (64, 1, 1), args, 0, race_check=True)
    assert_healthy()


def test_timing_matmul_64_and_512():
    for size in (64, 512):
        case = cases.matmul_case(np.random.default_rng(2), size, size, size)
        launch(case)  # build and warm up
        start = time.perf_counter()
        launch(case)
        seconds = time.perf_counter() - start
        np.testing.assert_array_equal(case.args[2], case.expected[2])
        print(f"matmul_mma {size}^3: {seconds * 1e3:.1f} ms")
        assert seconds < (1.0 if size == 64 else 20.0)


# ----------------------------------------------------------------------------- misuse

def fails(exc_type, code, name, args, block=(32, 1, 1)):
    with pytest.raises(exc_type) as info:
        kernel(code, name).launch((1, 1, 1), block, args, 0)
    assert_healthy()
    return info.value


MMA_EARLY_RETURN = """
extern "C" __global__ void early(float* out) {
    unsigned a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
    float c[4] = {0, 0, 0, 0};
    if (threadIdx.x == 5) return;
    mma_m16n8k16_f16(c, a, b, c);
    out[threadIdx.x] = c[0];
}
"""


def test_lane_returning_before_mma_is_a_deadlock():
    e = fails(BarrierError, MMA_EARLY_RETURN, "early", [np.zeros(32, np.float32)])
    text = str(e)
    assert "mma_m16n8k16_f16" in text and "line 6" in text, text
    assert "lane 5" in text and "(5,0,0)" in text, text


LDMATRIX_BAD = """
extern "C" __global__ void bad(const unsigned short* g, unsigned* out, int mode) {
    __shared__ __align__(16) unsigned short tile[32 * 8];
    for (int i = threadIdx.x; i < 32 * 8; i += 32) tile[i] = g[i];
    __syncthreads();
    const unsigned short* row = &tile[threadIdx.x * 8];
    if (mode == 0 && threadIdx.x == 5) row += 4;
    if (mode == 1 && threadIdx.x == 3) row = g + 8;
    unsigned r[4];
    ldmatrix_x4(r, row);
    out[threadIdx.x] = r[0];
}
"""


def test_ldmatrix_misaligned_row():
    args = [np.zeros(256, np.uint16), np.zeros(32, np.uint32), np.int32(0)]
    e = fails(KernelFault, LDMATRIX_BAD, "bad", args)
    assert "ldmatrix_x4: lane 5's row address 0x" in str(e), str(e)
    assert "is not 16-byte aligned (row addresses must be multiples of 16 bytes)" in str(e)
    assert e.line == 10 and e.thread == (5, 0, 0)


def test_ldmatrix_row_in_global_memory():
    args = [np.zeros(256, np.uint16), np.zeros(32, np.uint32), np.int32(1)]
    e = fails(KernelFault, LDMATRIX_BAD, "bad", args)
    assert "ldmatrix_x4: lane 3's row (16 bytes at 0x" in str(e), str(e)
    assert "is not in shared memory (it points into an array argument, global memory)" in str(e)
    assert e.line == 10


def test_ldmatrix_ignores_addresses_it_does_not_use():
    code = LDMATRIX_BAD.replace("ldmatrix_x4", "ldmatrix_x2").replace("threadIdx.x == 5", "threadIdx.x == 17")
    args = [np.arange(256, dtype=np.uint16), np.zeros(32, np.uint32), np.int32(0)]
    kernel(code, "bad").launch((1, 1, 1), (32, 1, 1), args, 0)
    want = cases.ldmatrix_expected(args[0].reshape(32, 8), 2, False)[:, 0]
    np.testing.assert_array_equal(args[1], want)


WMMA_BAD = """
#include <mma.h>
#include <cuda_fp16.h>
using namespace nvcuda;
extern "C" __global__ void bad(const __half* a, float* out, int ldm, int offset, int per_lane) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
    const __half* p = a + offset + (per_lane ? (threadIdx.x % 2) * 16 : 0);
    wmma::load_matrix_sync(fa, p, ldm);
    out[threadIdx.x] = __half2float(fa.x[0]);
}
"""


@pytest.mark.parametrize("ldm, offset, per_lane, message", [
    (20, 0, 0, "wmma::load_matrix_sync: ldm = 20 is not a multiple of 8; for 2-byte elements CUDA requires ldm to "
               "be a multiple of 8 elements (16 bytes)"),
    (16, 8, 0, "wmma::load_matrix_sync: the pointer is 16 bytes past a multiple of 32 from the start of its array; "
               "CUDA requires a 256-bit (32-byte) aligned pointer"),
    (16, 0, 1, "wmma::load_matrix_sync: every lane of the warp must pass the same pointer, ldm and layout; lane 0 "
               "passed"),
])
def test_wmma_load_misuse(ldm, offset, per_lane, message):
    args = [np.zeros(16 * 64, np.float16), np.zeros(32, np.float32), np.int32(ldm), np.int32(offset),
            np.int32(per_lane)]
    e = fails(KernelFault, WMMA_BAD, "bad", args)
    assert message in str(e), str(e)
    assert e.line == 8


def test_wmma_io_and_race_check():
    case = cases.wmma_case(np.random.default_rng(3), "f16", False, True, False)
    report = launch(case, count_io=True, race_check=True)
    np.testing.assert_array_equal(case.args[3], case.expected[3])
    # 8 warps x 3 k steps, each lane loading its 8 elements of a 16x16 half tile: 512 bytes a tile.
    tiles = 8 * 3 * 512
    assert (report.io.shared_read, report.io.shared_written) == (tiles, tiles)
    assert report.io.per_array["A"] == (tiles, 0) and report.io.per_array["B"] == (tiles, 0)
    assert report.io.per_array["C0"] == (8 * 256 * 4, 0) and report.io.per_array["C"] == (0, 8 * 256 * 4)


@pytest.mark.parametrize("path", sorted((KERNELS / "tensor").glob("*.cu")), ids=lambda p: p.name)
def test_kernels_build_with_nvrtc(path, fibers):
    if fibers != "ucontext":
        pytest.skip("backend-independent")
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc", reason="needs the nvrtc extra")
    from grader.nvrtc import compile_check
    sizes = compile_check(path.read_text())
    assert set(sizes) == {"sm_80", "sm_90"}

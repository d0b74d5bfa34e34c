"""The memory profiler (profile=True): requests, 32-byte sectors and shared-memory wavefronts per
source line, each number worked out by hand from the access pattern."""
from __future__ import annotations

import json

import numpy as np
import pytest

from grader.course import solution_source
from grader.emulator import _toolchain
from grader.errors import BackendUnavailableError

from emulator_helpers import kernel

pytestmark = pytest.mark.skipif(_toolchain.clang() is None, reason="the profiler needs clang-16")

KERNELS = r"""
extern "C" __global__ void copy_strided(const float* a, float* b, int stride) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    b[i] = a[i * stride];
}
extern "C" __global__ void copy4(const float4* a, float4* b) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    b[i] = a[i];
}
extern "C" __global__ void shared_forms(const float* in, float* out) {
    __shared__ float s[64];
    __shared__ float4 v[64];
    int x = threadIdx.x;
    s[x] = in[x];
    v[x] = make_float4(in[x], 1.0f, 2.0f, 3.0f);
    __syncthreads();
    float all_one_word = s[0];
    float4 q = v[x];
    float4 strided = v[(x * 2) % 32];
    out[x] = all_one_word + q.x + q.w + strided.y;
}
extern "C" __global__ void diverge(const float* a, float* b) {
    int lane = threadIdx.x;
    float sum = 0.0f;
    for (int j = 0; j < lane; ++j) sum += a[j * 32 + lane];
    if (lane < 8) b[lane] = sum;
}
"""

# Rows of WIDTH floats (-DWIDTH=32 or 33): threads write row y, then read column y.
TILE_COLUMN = r"""
extern "C" __global__ void tile_column(const float* in, float* out) {
    __shared__ float t[32][WIDTH];
    int x = threadIdx.x, y = threadIdx.y;
    t[y][x] = in[y * 32 + x];
    __syncthreads();
    out[y * 32 + x] = t[x][y];
}
"""


def profile(name, grid, block, args, shared=0, source=KERNELS, options=()):
    return kernel(source, name, options).launch(grid, block, args, shared, profile=True).profile


def line_of(text, source=KERNELS):
    """The line of ``source`` (as the emulator numbers it) that contains ``text``."""
    [n] = [i for i, ln in enumerate(source.splitlines(), 1) if text in ln]
    return n


def only(rows, kind):
    [row] = [r for r in rows if r.kind == kind]
    return row


def test_coalesced_and_strided_copy():
    a = np.arange(32 * 1024, dtype=np.float32)
    b = np.zeros(1024, np.float32)
    p = profile("copy_strided", (4, 1, 1), (256, 1, 1), [a, b, np.int32(1)])
    # 32 warps; 32 consecutive floats = 128 bytes = 4 sectors per request
    assert p.totals == {"global_load_sectors": 128, "global_load_requests": 32, "global_store_sectors": 128,
                        "global_store_requests": 32, "shared_load_wavefronts": 0, "shared_load_requests": 0,
                        "shared_store_wavefronts": 0, "shared_store_requests": 0}
    load = only(p.line(line_of("b[i] = a[i * stride]")), "global load")
    assert (load.bytes, load.requests, load.units, load.ideal, load.lane_accesses) == (4, 32, 128, 128, 1024)
    np.testing.assert_array_equal(b, a[:1024])
    p = profile("copy_strided", (4, 1, 1), (256, 1, 1), [a, b, np.int32(32)])
    load = only(p.line(line_of("b[i] = a[i * stride]")), "global load")
    # a stride of 32 floats puts every lane in its own sector: 32 per request, ideal still 4
    assert (load.requests, load.units, load.ideal) == (32, 1024, 128)
    assert load.per_request == 32.0
    assert p.totals["global_store_sectors"] == 128


def test_float4_copy():
    a = np.arange(4096, dtype=np.float32)
    b = np.zeros(4096, np.float32)
    p = profile("copy4", (4, 1, 1), (256, 1, 1), [a, b])
    # 16 bytes per lane: a warp moves 512 bytes, 16 sectors, in one request
    for kind in ("global load", "global store"):
        row = only(p.line(line_of("b[i] = a[i];")), kind)
        assert (row.bytes, row.requests, row.units, row.ideal) == (16, 32, 512, 512)
    np.testing.assert_array_equal(b, a)


def test_column_read_bank_conflicts_and_padding():
    x = np.arange(1024, dtype=np.float32)
    out = np.zeros(1024, np.float32)
    p = profile("tile_column", (1, 1, 1), (32, 32, 1), [x, out], source=TILE_COLUMN, options=("-DWIDTH=32",))
    # a column of a 32 x 32 float tile: 32 words of one bank, 32 wavefronts per request
    load = only(p.line(line_of("out[y * 32 + x] = t[x][y]", TILE_COLUMN)), "shared load")
    assert (load.requests, load.units, load.ideal) == (32, 1024, 32)
    assert only(p.line(line_of("t[y][x] = in[y * 32 + x]", TILE_COLUMN)), "shared store").units == 32
    np.testing.assert_array_equal(out, x.reshape(32, 32).T.ravel())
    p = profile("tile_column", (1, 1, 1), (32, 32, 1), [x, out], source=TILE_COLUMN, options=("-DWIDTH=33",))
    # a row of 33 floats shifts each row by one bank: conflict-free
    load = only(p.line(line_of("out[y * 32 + x] = t[x][y]", TILE_COLUMN)), "shared load")
    assert (load.requests, load.units, load.ideal) == (32, 32, 32)
    assert p.totals["shared_load_wavefronts"] == 32
    np.testing.assert_array_equal(out, x.reshape(32, 32).T.ravel())


def test_broadcast_and_16_byte_shared_reads():
    x = np.arange(64, dtype=np.float32)
    out = np.zeros(64, np.float32)
    p = profile("shared_forms", (1, 1, 1), (64, 1, 1), [x, out])
    # every lane reads one word: a broadcast, one wavefront
    assert (only(p.line(line_of("= s[0]")), "shared load").requests, only(p.line(line_of("= s[0]")), "shared load").units) == (2, 2)
    # 16 bytes per lane: a quarter warp (128 bytes) per wavefront, 4 per request at best
    row = only(p.line(line_of("q = v[x]")), "shared load")
    assert (row.bytes, row.requests, row.units, row.ideal) == (16, 2, 8, 8)
    assert (only(p.line(line_of("v[x] = make_float4")), "shared store").bytes, only(p.line(line_of("v[x] = make_float4")), "shared store").units) == (16, 8)
    # v[2x % 32]: each quarter warp touches 8 float4 at a stride of 32 bytes, two per bank group:
    # 2 wavefronts per phase, 8 per request; the 16 distinct float4 would fit in 2
    row = only(p.line(line_of("strided = v[")), "shared load")
    assert (row.bytes, row.requests, row.units, row.ideal) == (16, 2, 16, 4)
    q = np.stack([x, np.ones(64), 2 * np.ones(64), 3 * np.ones(64)], 1)
    strided = q[(np.arange(64) * 2) % 32]
    np.testing.assert_allclose(out, x[0] + q[:, 0] + q[:, 3] + strided[:, 1])


def test_divergent_lanes_contribute_nothing():
    a = np.arange(1024, dtype=np.float32)
    b = np.zeros(64, np.float32)
    p = profile("diverge", (1, 1, 1), (32, 1, 1), [a, b])
    load = only(p.line(line_of("sum += a[j * 32 + lane]")), "global load")
    # lane L runs L iterations: the k-th request has lanes k+1..31, contiguous within a 128-byte
    # row of a, so it touches 4 - (k+1)//8 sectors
    assert load.requests == 31
    assert load.lane_accesses == sum(range(32))
    assert load.units == sum(4 - (k + 1) // 8 for k in range(31)) == 76
    store = only(p.line(line_of("b[lane] = sum")), "global store")
    assert (store.requests, store.units, store.lane_accesses) == (1, 1, 8)


def test_naive_vs_tiled_matmul():
    M = N = K = 64
    rng = np.random.default_rng(0)
    A = rng.random((M, K), dtype=np.float32)
    B = rng.random((K, N), dtype=np.float32)
    totals = {}
    for name in ("matmul_naive", "matmul_tiled"):
        C = np.zeros((M, N), np.float32)
        report = kernel(solution_source(name), name).launch(
            (4, 4, 1), (16, 16, 1), [A, B, C, np.int32(M), np.int32(N), np.int32(K)], 0, profile=True)
        np.testing.assert_allclose(C, A @ B, rtol=1e-4)
        totals[name] = report.profile.totals
    # naive: each of 128 warps (two rows of 16 threads) reads per k one A element per row (2 sectors)
    # and 16 consecutive B floats (2 sectors, the same for both rows): 2 requests, 4 sectors
    naive = totals["matmul_naive"]
    assert (naive["global_load_requests"], naive["global_load_sectors"]) == (128 * 64 * 2, 128 * 64 * 4)
    assert naive["shared_load_requests"] == 0
    # tiled: per 16-wide tile each warp loads two half rows of A and of B (4 sectors each)
    tiled = totals["matmul_tiled"]
    assert (tiled["global_load_requests"], tiled["global_load_sectors"]) == (128 * 4 * 2, 128 * 4 * 8)
    # the inner loop: As[ty][k] (a broadcast per half warp) and Bs[k][tx] (16 consecutive floats,
    # the same for both half warps), one wavefront each
    assert (tiled["shared_load_requests"], tiled["shared_load_wavefronts"]) == (128 * 4 * 32, 128 * 4 * 32)
    assert tiled["global_store_sectors"] == naive["global_store_sectors"] == 128 * 4


def test_table_and_dict():
    a = np.arange(32 * 256, dtype=np.float32)
    p = profile("copy_strided", (1, 1, 1), (256, 1, 1), [a, np.zeros(256, np.float32), np.int32(32)])
    text = p.table()
    assert "global load" in text and "32.0 sectors" in text and "<-" in text
    d = p.to_dict()
    assert d["totals"]["global_load_sectors"] == 256
    assert d["rows"][0]["line"] == line_of("b[i] = a[i * stride]") and d["rows"][0]["kind"] == "global load"


def test_without_clang_the_error_says_what_to_install(monkeypatch):
    k = kernel(KERNELS, "copy_strided")
    monkeypatch.setattr(_toolchain, "clang", lambda: None)
    with pytest.raises(BackendUnavailableError, match="clang-16"):
        k.launch((1, 1, 1), (32, 1, 1), [np.zeros(32, np.float32), np.zeros(32, np.float32), np.int32(1)], 0,
                 profile=True)


def test_cli_on_the_tiled_matmul_solution(tmp_path, capsys):
    from grader.__main__ import main

    path = tmp_path / "tiled.cu"
    path.write_text(solution_source("matmul_tiled"))
    out = tmp_path / "profile.json"
    assert main(["profile", "matmul_tiled", str(path), "--case", "one_tile", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "shared load" in text and "global loads:" in text
    # one 16 x 16 x 16 tile: 8 warps, each two half rows of A and of B (4 sectors each)
    totals = json.loads(out.read_text())["totals"]
    assert (totals["global_load_requests"], totals["global_load_sectors"]) == (16, 64)


LDMATRIX = r"""
extern "C" __global__ void rows(const unsigned short* x, unsigned* out) {
    __shared__ __align__(16) unsigned short t[8 * 8];
    int lane = threadIdx.x;
    for (int i = lane; i < 64; i += 32) t[i] = x[i];
    __syncthreads();
    unsigned r[1];
    ldmatrix_x1(r, &t[(lane % 8) * 8]);
    out[lane] = r[0];
}
"""


def test_ldmatrix_rows_count_on_the_students_line():
    x = np.arange(64, dtype=np.uint16)
    out = np.zeros(32, np.uint32)
    p = profile("rows", (1, 1, 1), (32, 1, 1), [x, out], source=LDMATRIX)
    load = only(p.line(line_of("ldmatrix_x1(r, &t[(lane % 8) * 8]);", LDMATRIX)), "shared load")
    # lanes 0-7 each read one 16-byte row (lanes 8-31 give no address): one request, 8 rows of
    # 16 bytes in distinct banks take 128 bytes, one wavefront
    assert (load.bytes, load.requests, load.units) == (16, 1, 1)


def test_both_branches_keep_their_line_when_their_code_is_alike():
    """The capstone calls one tile body in a masked and an unmasked copy that end alike: the
    compiler must not merge their tails (the merged copy has no line), so the V ldmatrix line
    holds every request of its 2 heads x 2 tiles x 8 warps x 4 key steps x 4 column pairs, 4 wavefronts each."""
    from grader.capstone import build
    from grader.emulator.profile import profile_case
    ex_id = build("fp16", 64, False, dict(WARPS=8, WARP_ROWS=16))
    p, _ = profile_case(ex_id, solution_source("capstone_fwd_d64"), case="one_block_two_tiles")
    assert all(r.line is not None for r in p.rows), [r for r in p.rows if r.line is None]
    v = only([r for r in p.rows if "ldmatrix_x4_trans" in r.code], "shared load")
    assert (v.requests, v.units) == (2 * 2 * 8 * 4 * 4, 2 * 2 * 8 * 4 * 4 * 4)

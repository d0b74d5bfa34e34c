"""TMA on the emulator: boxes of every rank with out-of-bounds tails, each swizzle, loads that land
when their mbarrier phase completes, stores through a bulk group; bytes counted; misuse named."""
from __future__ import annotations

import sys

import numpy as np
import pytest

import grader
from emulator_helpers import KERNELS, assert_healthy
from grader.emulator import _toolchain
from grader.errors import BarrierError, KernelArgumentError, KernelFault

sys.path.insert(0, str(KERNELS / "hopper"))
import hopper_cases as cases  # noqa: E402

needs_clang = pytest.mark.skipif(_toolchain.clang() is None, reason="the traced build needs clang-16 (apt-get install clang-16)")

CASES = cases.tma_cases()


def run(case, maps, **kw):
    k = grader.RawKernel(case.source, case.kernel, backend="emulator")
    out = {}

    def launch(args):
        out["report"] = k(case.grid, case.block, tuple(args), shared_mem=case.shared_mem, **kw)

    wrong = cases.run_tma(case, maps, launch, np.asarray, np.asarray)
    assert not wrong, f"{case.id}: {wrong}"
    return out["report"]


@pytest.mark.parametrize("index", range(len(CASES)), ids=[c.id for c, _ in CASES])
def test_boxes_land_exactly(index):
    run(*CASES[index])


@needs_clang
def test_the_traced_build_agrees_and_finds_no_race():
    run(*CASES[-1], race_check=True)


@needs_clang
def test_tma_bytes_are_counted():
    # The 64 x 8 box at column 40 of a 72-column array: 32 columns in bounds, 8 rows of 2 bytes.
    case, maps = next((c, m) for c, m in CASES if c.id.startswith("tma_load_2d_64x8_sw128"))
    io = run(case, maps, count_io=True).io
    assert io.per_array["map's tensor"] == (32 * 8 * 2, 0)
    assert io.shared_written == 64 * 8 * 2  # the whole box lands, its tail as zeros
    # The tiled copy: every element read once and written once.
    case, maps = CASES[-1]
    io = run(case, maps, count_io=True).io
    assert io.per_array["in's tensor"] == (100 * 72 * 2, 0)
    assert io.per_array["out's tensor"] == (0, 100 * 72 * 2)


def test_image_helper_swizzles_units():
    x = np.arange(64 * 8, dtype=np.uint16).reshape(8, 64)
    image = cases.box_image(x, (64, 8), (0, 0), 128).view(np.uint16).reshape(8, 8, 8)
    # Row r's 16-byte unit u lands at unit u ^ r.
    for r in range(8):
        for u in range(8):
            np.testing.assert_array_equal(image[r, u ^ r], x[r, 8 * u:8 * u + 8])


# ----------------------------------------------------------------------------- wrong usage

BODY = """
extern __shared__ unsigned char smem[];
extern "C" __global__ void k(const CUtensorMap* map, float* out) {
    __shared__ unsigned long long bar;
    float* tile = reinterpret_cast<float*>(smem + (1024 - __cvta_generic_to_shared(smem) % 1024) % 1024 + OFFSET);
    if (threadIdx.x == 0) { mbarrier_init(&bar, 1); fence_mbarrier_init(); }
    __syncthreads();
    if (threadIdx.x == 0) { mbarrier_arrive_expect_tx(&bar, BYTES); tma_load_2d(tile, map, 0, 0, &bar); }
    BEFORE
    while (!mbarrier_try_wait_parity(&bar, 0)) {}
    out[threadIdx.x] = tile[threadIdx.x];
}
"""


def launch(offset=0, nbytes=16 * 8 * 4, before="", **kw):
    code = BODY.replace("OFFSET", str(offset)).replace("BYTES", str(nbytes)).replace("BEFORE", before)
    x = np.arange(8 * 16, dtype=np.float32).reshape(8, 16)
    out = np.zeros(129, np.float32)
    grader.RawKernel(code, "k", backend="emulator")((1, 1, 1), (128, 1, 1), (grader.TensorMap(x, (16, 8)), out),
                                                     shared_mem=2048 + 16 * 8 * 4, **kw)
    return out


def test_the_wrong_usage_template_is_right():
    np.testing.assert_array_equal(launch()[:128], np.arange(128, dtype=np.float32))


def test_fewer_bytes_announced_than_land():
    with pytest.raises(BarrierError) as info:
        launch(nbytes=256)
    assert "phase 0 has 0 of 1 arrivals still to come (last arrival on line 8) and -256 of 256 announced bytes" in str(info.value)
    assert "More bytes landed than expect_tx announced" in str(info.value)
    assert_healthy()


def test_a_destination_off_the_128_byte_grid():
    with pytest.raises(KernelFault) as info:
        launch(offset=64)
    assert "tma_load_2d: shared address" in str(info.value) and "is not a multiple of 128 bytes" in str(info.value)
    assert_healthy()


def test_the_destination_is_poisoned_until_the_phase_completes(monkeypatch):
    # The issuing thread reads the tile before it waits: the bytes are still in flight (they arrive
    # when a thread waits on the barrier), so it sees 0xFF bytes (NaN) in the normal build.
    monkeypatch.setattr(_toolchain, "clang", lambda: None)
    out = launch(before="if (threadIdx.x == 0) out[128] = tile[5];")
    assert np.isnan(out[128])


@needs_clang
def test_a_read_before_the_wait_is_named():
    with pytest.raises(KernelFault) as info:
        launch(before="if (threadIdx.x == 0) out[128] = tile[5];", race_check=True)
    msg = str(info.value)
    assert "read of shared memory that the TMA load on line 8 has not written yet: its bytes land when phase 0 of the mbarrier" in msg
    assert info.value.line == 9
    assert_healthy()


def test_a_pointer_that_is_no_tensor_map():
    code = BODY.replace("OFFSET", "0").replace("BYTES", "512").replace("BEFORE", "")
    with pytest.raises(KernelFault) as info:
        grader.RawKernel(code, "k", backend="emulator")((1, 1, 1), (128, 1, 1), (np.zeros(128, np.uint8), np.zeros(128, np.float32)),
                                                         shared_mem=4096)
    assert "holds no tensor map made by grader.TensorMap" in str(info.value)
    assert_healthy()


@pytest.mark.parametrize("box, swizzle, expected", [
    ((6, 8), 0, "must be a multiple of 16 bytes"),
    ((16, 8), 128, "with a 128-byte swizzle, the box's rows are 128 bytes (32 elements)"),
    ((16, 300), 0, "each box size is 1..256 elements"),
    ((16,), 0, "the box needs one size per dimension of the array (2)"),
])
def test_tensor_maps_are_checked(box, swizzle, expected):
    with pytest.raises(KernelArgumentError) as info:
        grader.TensorMap(np.zeros((8, 16), np.float32), box, swizzle)
    assert expected in str(info.value)

"""grader.device: the table's facts agree with one another, and the occupancy it implies."""
from __future__ import annotations

import pytest

from grader.device import A100_SXM, GPUS, H100_SXM, H200, block_limits, blocks_per_sm


@pytest.mark.parametrize("gpu", GPUS, ids=lambda g: g.name)
def test_tensor_peak_is_the_clock_times_the_sms(gpu):
    # a dense fp16 tensor-core peak is SMs x flops per clock per SM x the clock it is quoted at:
    # 4096 on Hopper, 2048 on Ampere; a typo in any of the three fields breaks the product
    per_clock = 4096 if gpu.arch == "sm_90" else 2048
    assert gpu.fp16_dense_tflops == pytest.approx(gpu.sms * per_clock * gpu.tensor_clock_mhz * 1e6 / 1e12, rel=1e-3)
    assert gpu.bf16_dense_tflops == gpu.fp16_dense_tflops
    if gpu.fp8_dense_tflops is not None:
        assert gpu.fp8_dense_tflops == pytest.approx(2 * gpu.fp16_dense_tflops, rel=1e-3)


@pytest.mark.parametrize("gpu", GPUS, ids=lambda g: g.name)
def test_per_sm_limits_agree(gpu):
    assert gpu.max_warps_per_sm * gpu.warp_size == gpu.max_threads_per_sm
    assert gpu.max_shared_per_block_optin + gpu.shared_reserved_per_block == gpu.shared_per_sm
    assert gpu.static_shared_per_block < gpu.max_shared_per_block_optin


def test_h200_is_an_h100_with_more_memory():
    assert (H200.hbm_gb, H200.hbm_tbps) == (141, 4.8)
    assert H200.sms == H100_SXM.sms and H200.fp8_dense_tflops == H100_SXM.fp8_dense_tflops
    assert A100_SXM.fp8_dense_tflops is None


def test_occupancy():
    # 128 threads, 46 080 bytes (splitk_fwd at d = 64): 228 KB / (45 KB + 1 KB) = 4 by shared memory
    assert block_limits(128, 46080) == {"shared memory": 4, "warps": 16, "blocks": 32}
    assert blocks_per_sm(64, 128, 46080) == (4, "shared memory")
    # 255 registers round up to 256 a lane, 8192 a warp: a sub-partition (16384) holds 2 warps, the SM 8
    assert blocks_per_sm(255, 256, 0) == (1, "registers")
    assert blocks_per_sm(32, 1024, 0) == (2, "registers")  # 2 x 32 warps: registers and warps tie, registers named
    assert blocks_per_sm(16, 32, 0) == (32, "blocks")
    # the A100's 164 KB: two 80 KB blocks (with their 1 KB each), not the H100's two
    assert blocks_per_sm(32, 128, 80 * 1024, gpu=A100_SXM) == (2, "shared memory")
    assert blocks_per_sm(32, 128, 80 * 1024) == (2, "shared memory")
    assert blocks_per_sm(32, 128, 75 * 1024) == (3, "shared memory")
    assert blocks_per_sm(32, 128, 75 * 1024, gpu=A100_SXM) == (2, "shared memory")

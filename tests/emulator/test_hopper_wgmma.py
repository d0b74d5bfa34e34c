"""wgmma on the emulator: every N, both 16-bit types, A from shared memory or registers, each
swizzle and major-ness through matrix descriptors, exact; each misuse of the warpgroup's rules named."""
from __future__ import annotations

import sys
import time

import numpy as np
import pytest

from emulator_helpers import KERNELS, assert_healthy, kernel
from grader import wgmma_ptx
from grader.emulator import _toolchain
from grader.errors import BarrierError, KernelFault

sys.path.insert(0, str(KERNELS / "hopper"))
import hopper_cases as cases  # noqa: E402

needs_clang = pytest.mark.skipif(_toolchain.clang() is None, reason="the traced build needs clang-16 (apt-get install clang-16)")


def test_the_generated_ptx_operand_lists_are_current():
    assert wgmma_ptx.HEADER.read_text() == wgmma_ptx.render()


def test_every_shape_and_layout_is_exact():
    source = cases.wgmma_source()
    shapes = cases.wgmma_shapes()
    assert {n for n, *_ in shapes} == set(range(8, 257, 8))
    assert {a for _, _, a, _ in shapes} == {*cases.LAYOUTS, "R"} and {b for *_, b in shapes} == set(cases.LAYOUTS)
    for c in (cases.wgmma_case(*shape, source) for shape in shapes):
        args = [a.copy() for a in c.args]
        kernel(source, c.kernel).launch(c.grid, c.block, args, c.shared_mem)
        for index, want in c.expected.items():
            np.testing.assert_array_equal(args[index], want, err_msg=c.id)


def test_four_warpgroups_in_under_two_seconds():
    # The speed target: 4 warpgroups, one m64n128k16 wgmma each per k-step, C 1024 x 128,
    # under 2 s on 2 cores (benchmarks/hopper_primitives_gpu.py's emulator figure measures it).

    source = cases.wgmma_source()
    c = cases.matmul_case(1024, source)
    kern = kernel(source, c.kernel)
    kern.launch(c.grid, c.block, [a.copy() for a in c.args], c.shared_mem)  # the worker warm
    start = time.perf_counter()
    kern.launch(c.grid, c.block, c.args, c.shared_mem)
    assert time.perf_counter() - start < 2.0
    np.testing.assert_array_equal(c.args[2], c.expected[2])


@needs_clang
def test_the_traced_build_agrees_and_finds_no_race():
    source = cases.wgmma_source()
    for c in [cases.wgmma_case(64, "f16", "M32", "K128", source), cases.wgmma_case(32, "bf16", "R", "K64", source),
              cases.matmul_case(512, source)]:
        kernel(source, c.kernel).launch(c.grid, c.block, c.args, c.shared_mem, race_check=True)
        np.testing.assert_array_equal(c.args[2], c.expected[2])


@needs_clang
def test_io_counts_the_operands_wgmma_reads_from_shared_memory():
    # The kernel stores A (64 x 64) and B (64 x 64) of 16-bit values into shared memory; the four
    # k-steps' wgmmas read each of their bytes once; nothing else reads shared memory.
    source = cases.wgmma_source()
    c = cases.wgmma_case(64, "f16", "K128", "K128", source)
    io = kernel(source, c.kernel).launch(c.grid, c.block, c.args, c.shared_mem, count_io=True).io
    assert io.shared_written == io.shared_read == 2 * 64 * 64 * 2
    assert io.per_array["A"] == (64 * 64 * 2, 0) and io.per_array["C"] == (0, 64 * 64 * 4)


# ----------------------------------------------------------------------------- wrong usage

# One warpgroup, a 64 x 16 A and a 16 x 8 B, both K-major without swizzle (core matrices of 128
# bytes: A's two K halves 128 bytes apart, its 8-row groups 256 apart; B's halves 128 apart).
TEMPLATE = """
extern "C" __global__ void k(float* out) {
    __shared__ __align__(1024) unsigned short sa[64 * 16], sb[16 * 8];
    const int t = threadIdx.x;
    for (int i = t; i < 64 * 16; i += blockDim.x) sa[i] = 0x3c00;  // 1.0 in every slot
    for (int i = t; i < 16 * 8; i += blockDim.x) sb[i] = 0x3c00;
    FENCE_PROXY
    __syncthreads();
    const unsigned long long da = make_smem_desc<0>(sa, 128, 256), db = make_smem_desc<0>(sb, 128, 256);
    float d[4] = {0, 0, 0, 0};
    BEFORE
    wgmma_m64n8k16_f16_ss(d, da, db);
    BETWEEN
    wgmma_commit_group();
    wgmma_wait_group<0>();
    AFTER
    for (int i = 0; i < 4; ++i) out[t * 4 + i] = d[i];
}
"""


def build(before="wgmma_fence();", between="", after="", fence="fence_proxy_async();"):
    code = (TEMPLATE.replace("BEFORE", before).replace("BETWEEN", between).replace("AFTER", after)
            .replace("FENCE_PROXY", fence))
    return kernel(code, "k")


def run(kern, threads=128, **kw):
    out = np.zeros(4 * threads, np.float32)
    kern.launch((1, 1, 1), (threads, 1, 1), [out], 0, **kw)
    return out


def fails(exc, kern, threads=128, **kw):
    with pytest.raises(exc) as info:
        run(kern, threads, **kw)
    assert_healthy()
    return info.value


def test_the_template_is_right():
    np.testing.assert_array_equal(run(build()), np.full(512, 16, np.float32))


def test_a_wgmma_without_a_fence():
    e = fails(KernelFault, build(before=""))
    assert ("wgmma_m64n8k16_f16_ss: thread (0,0,0) issues a wgmma without a wgmma_fence() before it: every thread of "
            "the warpgroup must execute wgmma_fence() before its first wgmma") in str(e)
    assert e.line == 12


def test_a_warp_that_returned_early():
    # The first 96 arrive before the last warp returns (schedule order): a deadlock, its report names them.
    e = fails(BarrierError, build(before="if (t >= 96) return; wgmma_fence();"))
    assert ("warpgroup 0 waits at its wgmma for threads (96,0,0)..(127,0,0) [32 threads], which returned "
            "(wgmma_m64n8k16_f16_ss)") in str(e)
    # A warp that returned before the others arrive is named at once.
    e = fails(KernelFault, build(before="if (t < 32) return; wgmma_fence();"))
    assert ("wgmma_m64n8k16_f16_ss: threads (0,0,0)..(31,0,0) [32 threads] of warpgroup 0 have already returned, so "
            "they never join this wgmma_m64n8k16_f16_ss: all 128 threads of the warpgroup must execute it") in str(e)


def test_a_warp_that_waits_elsewhere():
    e = fails(BarrierError, build(before="wgmma_fence(); if (t >= 96) __syncthreads();"))
    msg = str(e)
    assert "threads (0,0,0)..(95,0,0) [96 threads] wait at wgmma_m64n8k16_f16_ss on line 12 (warpgroup 0: 96 of its 128 threads arrived)" in msg
    assert "threads (96,0,0)..(127,0,0) [32 threads] wait at __syncthreads() on line 11" in msg
    assert "warpgroup 0 waits at its wgmma for threads (96,0,0)..(127,0,0) [32 threads], which wait elsewhere" in msg
    assert "every one of the 128 threads of warps 4k..4k+3 must call it" in msg


def test_a_block_smaller_than_a_warpgroup():
    e = fails(KernelFault, build(), threads=96)
    assert ("thread (0,0,0) is in warpgroup 0 (threads 0..127), but the block has 96 threads: wgmma_m64n8k16_f16_ss "
            "needs all 128 threads of 4 consecutive warps, the first a multiple of 4") in str(e)


def test_accumulators_written_while_in_flight():
    e = fails(KernelFault, build(between="d[1] = 5.0f;"))
    assert ("wgmma_wait_group<0>: thread (0,0,0) wrote accumulator register 1 while it was in flight from the wgmma on "
            "line 12 (between the wgmma and this wait)") in str(e)


def test_accumulators_read_while_in_flight_are_nan_in_the_normal_build(monkeypatch):
    monkeypatch.setattr(_toolchain, "clang", lambda: None)
    out = run(build(between="out[t] = d[0];", after="if (t == 0) d[0] = out[0];"))
    assert np.isnan(out[0])


@needs_clang
def test_accumulators_read_while_in_flight_are_named():
    e = fails(KernelFault, build(between="out[t] = d[0];"), race_check=True)
    assert ("read of wgmma accumulator registers still in flight from the wgmma on line 12: a wgmma's accumulators "
            "belong to the tensor cores from the wgmma until the wgmma_wait_group that retires its group") in str(e)
    assert e.line == 13


def test_a_wait_that_does_not_cover_an_uncommitted_wgmma(monkeypatch):
    # No commit: the wait retires nothing, so the accumulators are still NaN after it.
    monkeypatch.setattr(_toolchain, "clang", lambda: None)
    code = TEMPLATE.replace("    wgmma_commit_group();\n", "").replace("BEFORE", "wgmma_fence();")
    for token in ("BETWEEN", "AFTER"):
        code = code.replace(token, "")
    out = run(kernel(code.replace("FENCE_PROXY", "fence_proxy_async();"), "k"))
    assert np.isnan(out).all()


def test_accumulators_changed_after_the_wait_without_a_fence():
    after = "d[0] += 1.0f; wgmma_m64n8k16_f16_ss(d, da, db); wgmma_commit_group(); wgmma_wait_group<0>();"
    e = fails(KernelFault, build(after=after))
    assert ("thread (0,0,0) changed these accumulator registers after wgmma_wait_group on line 15 returned them, and "
            "no wgmma_fence() came between that and this wgmma") in str(e)
    # With the fence it is right: 16 + 1 + 16.
    ok = "d[0] += 1.0f; wgmma_fence(); wgmma_m64n8k16_f16_ss(d, da, db); wgmma_commit_group(); wgmma_wait_group<0>();"
    out = run(build(after=ok)).reshape(128, 4)
    np.testing.assert_array_equal(out[:, 0], 33)
    np.testing.assert_array_equal(out[:, 1:], 32)


@needs_clang
def test_operands_written_by_ordinary_stores_without_the_proxy_fence():
    e = fails(KernelFault, build(fence=""), race_check=True)
    assert ("wgmma_m64n8k16_f16_ss on line 12 reads its A from shared memory (window byte" in str(e))
    assert ("with an ordinary store and did not make visible to the async proxy: wgmma and TMA read shared memory "
            "through the async proxy, so each thread that writes an operand with ordinary stores must execute "
            "fence_proxy_async() after its stores") in str(e)
    assert e.line == 5


def variant(old, new):
    """The template, right but for one change."""
    code = TEMPLATE.replace("BEFORE", "wgmma_fence();").replace("FENCE_PROXY", "fence_proxy_async();")
    return kernel(code.replace("BETWEEN", "").replace("AFTER", "").replace(old, new), "k")


def test_a_descriptor_that_leaves_shared_memory():
    e = fails(KernelFault, variant("make_smem_desc<0>(sa, 128, 256)", "make_smem_desc<0>(sa, 128, 8192)"))
    assert "wgmma_m64n8k16_f16_ss: the A descriptor reaches shared-window byte" in str(e)
    assert "outside the block's shared memory" in str(e)


def test_descriptors_must_be_uniform():
    e = fails(KernelFault, variant("make_smem_desc<0>(sb, 128, 256)", "make_smem_desc<0>(sb, t < 64 ? 128 : 64, 256)"))
    assert "thread (64,0,0) passes desc_b" in str(e)
    assert "must be the same in every thread of the warpgroup" in str(e)


def test_the_header_builds_for_sm_90a_with_nvrtc():
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc", reason="needs the nvrtc extra: pip install -e '.[nvrtc]'")
    from grader.nvrtc import compile_check

    assert set(compile_check(cases.wgmma_source(), archs=("sm_90a",))) == {"sm_90a"}

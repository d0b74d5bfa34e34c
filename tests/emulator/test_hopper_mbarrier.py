"""mbarrier on the emulator: phases, parities, arrivals and transaction bytes as the PTX ISA defines
them; a try_wait that times out; each misuse and each deadlock named (the barrier, its phase, its
arrivals and bytes, and who waits where)."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from emulator_helpers import KERNELS, assert_healthy, kernel
from grader.errors import BarrierError, KernelFault

sys.path.insert(0, str(KERNELS / "hopper"))
import hopper_cases as cases  # noqa: E402


CASES = {c.id: c for c in cases.mbarrier_cases()}


def launch_case(case_id, **kw):
    c = CASES[case_id]
    args = [a.copy() for a in c.args]
    kernel(c.source, c.kernel).launch(c.grid, c.block, args, c.shared_mem, **kw)
    for index, want in c.expected.items():
        np.testing.assert_array_equal(args[index], want)


def test_phases_alternate_parity():
    launch_case("mbarrier_phases")


@pytest.mark.parametrize("race_check", [False, True], ids=["normal", "race-checked"])
def test_producer_consumer_ring(race_check):
    # The race detector learns the ring's order from the barriers: no race is reported.
    launch_case("mbarrier_ring", race_check=race_check)


def test_try_wait_returns_false_when_its_time_limit_passes():
    launch_case("mbarrier_time_limit")


PRELUDE = """
extern "C" __global__ void k(float* out) {
    __shared__ unsigned long long bar;
    if (threadIdx.x == 0) {
        mbarrier_init(&bar, COUNT);
        fence_mbarrier_init();
    }
    __syncthreads();
"""


def fails(exc, body, count=128, threads=128):
    code = PRELUDE.replace("COUNT", str(count)) + body + "\n}\n"
    with pytest.raises(exc) as info:
        kernel(code, "k").launch((1, 1, 1), (threads, 1, 1), [np.zeros(4, np.float32)], 0)
    assert_healthy()
    return str(info.value)


def test_arrivals_that_never_complete_the_phase():
    msg = fails(BarrierError, """
    mbarrier_arrive(&bar);
    while (!mbarrier_try_wait_parity(&bar, 0)) {}
    """, count=129)
    assert "deadlock: no thread of the block can continue" in msg
    assert "threads (0,0,0)..(127,0,0) [128 threads] wait in mbarrier_try_wait_parity(parity 0) on line 11 for the mbarrier at shared address" in msg
    assert ("(initialised on line 5), whose phase 0 (parity 0) waits for 1 of its 129 arrivals and 0 transaction bytes "
            "(0 expected, 0 landed)") in msg
    assert ("phase 0 has 1 of 129 arrivals still to come (last arrival on line 10) and 0 of 0 announced bytes still "
            "to land; threads (0,0,0)..(127,0,0) [128 threads] wait for the current phase (parity 0)") in msg


def test_announced_bytes_that_never_land():
    msg = fails(BarrierError, """
    if (threadIdx.x == 0) mbarrier_arrive_expect_tx(&bar, 4096);
    while (!mbarrier_try_wait_parity(&bar, 0)) {}
    """, count=1)
    assert "whose phase 0 (parity 0) waits for 0 of its 1 arrivals and 4096 transaction bytes (4096 expected, 0 landed)" in msg
    assert "4096 of 4096 announced bytes still to land (last expect_tx on line 10)" in msg
    assert "All arrivals are in, but announced bytes never landed" in msg


def test_waiting_for_a_phase_nobody_arrives_at():
    # Phase 0 completes; the threads then wait for phase 1 without arriving in it.
    msg = fails(BarrierError, """
    mbarrier_arrive(&bar);
    while (!mbarrier_try_wait_parity(&bar, 0)) {}
    while (!mbarrier_try_wait_parity(&bar, 1)) {}
    """)
    assert "mbarrier_try_wait_parity(parity 1) on line 12 for the mbarrier at shared address" in msg
    assert "(initialised on line 5), whose phase 1 (parity 1) waits for 128 of its 128 arrivals" in msg
    assert "phase k has parity k % 2" in msg


def test_a_wait_on_the_previous_phase_parity_returns_at_once():
    # Parity 1 in phase 0 names the phase before it, which counts as complete (PTX ISA).
    out = np.zeros(4, np.float32)
    code = PRELUDE.replace("COUNT", "1") + """
    if (mbarrier_try_wait_parity(&bar, 1)) out[threadIdx.x] = 1.0f;
    }
    """
    kernel(code, "k").launch((1, 1, 1), (4, 1, 1), [out], 0)
    np.testing.assert_array_equal(out, [1, 1, 1, 1])


def test_an_arrival_too_many():
    msg = fails(KernelFault, """
    if (threadIdx.x == 0) mbarrier_arrive_expect_tx(&bar, 16);
    __syncthreads();
    if (threadIdx.x == 1) mbarrier_arrive(&bar);
    """, count=1)
    assert "mbarrier_arrive: thread (1,0,0) arrives at the mbarrier at shared address" in msg
    assert ("(initialised on line 5) in phase 0, which already has all 1 of its arrivals and waits only for 16 "
            "announced bytes: an arrival too many") in msg


def test_an_uninitialised_barrier():
    code = """
    extern "C" __global__ void k(float* out) {
        __shared__ unsigned long long bar;
        mbarrier_arrive(&bar);
    }
    """
    with pytest.raises(KernelFault) as info:
        kernel(code, "k").launch((1, 1, 1), (32, 1, 1), [np.zeros(4, np.float32)], 0)
    assert "mbarrier_arrive: the mbarrier at" in str(info.value)
    assert "was never initialised: one thread must call mbarrier_init on it" in str(info.value)
    assert info.value.line == 4


def test_a_barrier_outside_shared_memory():
    code = """
    extern "C" __global__ void k(unsigned long long* bars) {
        mbarrier_init(bars, 1);
    }
    """
    with pytest.raises(KernelFault) as info:
        kernel(code, "k").launch((1, 1, 1), (1, 1, 1), [np.zeros(4, np.uint64)], 0)
    assert "is not in shared memory (it points into an array argument)" in str(info.value)


def test_the_same_kernels_build_for_sm_90a_with_nvrtc():
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc", reason="needs the nvrtc extra: pip install -e '.[nvrtc]'")
    from grader.nvrtc import compile_check

    assert set(compile_check(CASES["mbarrier_ring"].source, archs=("sm_90a",))) == {"sm_90a"}

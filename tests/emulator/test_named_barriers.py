"""Named barriers (bar.sync / bar.arrive with an id and a count) on the emulator: a producer warp
hands buffers to consumer warps, the race check orders what the barriers order, and each misuse is
named: a missing wait is a race, a count that no phase reaches is a deadlock, two counts in one
phase are refused."""
from __future__ import annotations

import numpy as np
import pytest

from emulator_helpers import assert_healthy, kernel
from grader.emulator import _toolchain
from grader.errors import BarrierError, KernelFault, RaceConditionError

needs_clang = pytest.mark.skipif(_toolchain.clang() is None, reason="the race check needs clang-16 (apt-get install clang-16)")

# Warp 0 copies tile j of x into buffer j % 2 and arrives at FULL; warps 1 and 2 wait at FULL, add
# the tile up, and arrive at EMPTY, which the producer waits at before it refills the buffer.
RELAY = """
extern "C" __global__ void relay(const float* x, float* out, int tiles) {
    __shared__ float buf[2][64];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (warp == 0) {
        for (int j = 0; j < tiles; ++j) {
            const int s = j % 2;
            if (j >= 2) named_barrier_sync(3 + s, 96);
            buf[s][lane] = x[j * 64 + lane];
            buf[s][lane + 32] = x[j * 64 + lane + 32];
            named_barrier_arrive(1 + s, 96);
        }
    } else {
        const int c = threadIdx.x - 32;
        float acc = 0.0f;
        for (int j = 0; j < tiles; ++j) {
            const int s = j % 2;
            named_barrier_sync(1 + s, 96);
            acc += buf[s][c];
            named_barrier_arrive(3 + s, 96);
        }
        out[c] = acc;
    }
}
"""
TILES = 5


def run(code, race_check=False):
    x = np.arange(TILES * 64, dtype=np.float32)
    out = np.zeros(64, np.float32)
    kernel(code, "relay").launch((1, 1, 1), (96, 1, 1), [x, out, np.int32(TILES)], 0, race_check=race_check)
    return x, out


def test_a_producer_warp_hands_tiles_to_consumer_warps():
    x, out = run(RELAY)
    np.testing.assert_array_equal(out, x.reshape(TILES, 64).sum(axis=0))


@needs_clang
def test_the_race_check_orders_what_the_barriers_order():
    x, out = run(RELAY, race_check=True)
    np.testing.assert_array_equal(out, x.reshape(TILES, 64).sum(axis=0))


@needs_clang
@pytest.mark.parametrize("find, replace", [
    ("            named_barrier_sync(1 + s, 96);\n            acc += buf[s][c];\n",
     "            acc += buf[s][c];\n            named_barrier_sync(1 + s, 96);\n"),
    ("            if (j >= 2) named_barrier_sync(3 + s, 96);\n            buf[s][lane] = x[j * 64 + lane];\n",
     "            buf[s][lane] = x[j * 64 + lane];\n            if (j >= 2) named_barrier_sync(3 + s, 96);\n"),
], ids=["consumer-reads-before-full", "producer-refills-before-empty"])
def test_a_wait_after_the_access_is_a_race_on_the_buffer(find, replace):
    assert RELAY.count(find) == 1
    with pytest.raises(RaceConditionError) as info:
        run(RELAY.replace(find, replace), race_check=True)
    msg = str(info.value)
    assert "race condition on shared memory (buf" in msg and "`acc += buf[s][c];`" in msg
    assert "`buf[s][lane] = x[j * 64 + lane];`" in msg
    assert "the writer arrives (named_barrier_arrive) after it has written and the reader waits" in msg
    assert_healthy()


def test_a_count_no_phase_reaches_is_a_deadlock_that_names_the_barrier():
    with pytest.raises(BarrierError) as info:
        run(RELAY.replace("            named_barrier_arrive(1 + s, 96);\n", ""))  # the producer never says "full"
    msg = str(info.value)
    assert "deadlock" in msg and "wait at named barrier 1 (64 of 96 threads arrived) on line 17" in msg
    assert "as many threads as its count" in msg
    assert_healthy()


@pytest.mark.parametrize("find, replace, expected", [
    ("named_barrier_sync(1 + s, 96);", "named_barrier_sync(1 + s, 64);",
     "but this phase of barrier 1 began with count 96"),
    ("named_barrier_arrive(1 + s, 96);", "named_barrier_arrive(1 + s, 48);",
     "the thread count must be a positive multiple of 32"),
    ("named_barrier_arrive(1 + s, 96);", "named_barrier_arrive(s, 96);",
     "the barrier id must be 1..15"),
    ("            if (j >= 2) named_barrier_sync(3 + s, 96);\n", "",
     "arrives at barrier 1 a second time in one phase"),
], ids=["two-counts", "not-whole-warps", "id-0", "producer-runs-ahead"])
def test_a_misused_barrier_is_refused(find, replace, expected):
    with pytest.raises(KernelFault) as info:
        run(RELAY.replace(find, replace))
    assert expected in str(info.value)
    assert_healthy()


def test_a_count_smaller_than_the_threads_that_meet_says_so():
    # FULL counted for the consumers alone, on both sides: each phase completes with the first 64
    # arrivals and the rest spill into the next, until a thread arrives twice in one phase.
    code = RELAY.replace("named_barrier_sync(1 + s, 96);", "named_barrier_sync(1 + s, 64);") \
        .replace("named_barrier_arrive(1 + s, 96);", "named_barrier_arrive(1 + s, 64);")
    with pytest.raises(KernelFault) as info:
        run(code)
    assert "96 different threads of the block have arrived at barrier 1, more than its count 64" in str(info.value)
    assert_healthy()

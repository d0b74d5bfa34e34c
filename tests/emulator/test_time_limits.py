"""The time limit counts the worker's CPU time: a busy machine does not stop a correct kernel, while
an endless loop is still stopped after its CPU seconds and a blocked kernel after the wall-clock cap."""
from __future__ import annotations

import os
import subprocess
import time

import numpy as np
import pytest

from emulator_helpers import assert_healthy, kernel
from grader import emulator
from grader.checks import run_check
from grader.errors import BarrierError, KernelTimeoutError

HOGS = 6  # busy loops sharing the worker's one core: it gets about 1/7 of it

# Each thread works BUSY_ITERS dependent steps: about 0.25 CPU s for the launch below (the test reads it).
BUSY = """
extern "C" __global__ void busy(float* out, int iters) {
    float x = threadIdx.x;
    for (int k = 0; k < iters; ++k) x = x * 0.999f + 1.0f;
    out[blockIdx.x * blockDim.x + threadIdx.x] = x;
}
"""
BUSY_ITERS = 300_000

HALF_WAIT = """
extern "C" __global__ void half_wait(float* out) {
    if (threadIdx.x < 16) __syncthreads();
    out[threadIdx.x] = 1.0f;
}
"""

# A correct vector_add that also works BUSY_ITERS / 8 steps per thread (the sum is unchanged).
SLOW_VECTOR_ADD = """
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float x = 1.0f;
    for (int k = 0; k < %d; ++k) x = x * 0.999f + 1.0f;
    if (i < n) c[i] = a[i] + b[i] + (x < 0.0f ? 1.0f : 0.0f);
}
""" % (BUSY_ITERS // 8)

SPIN = """
extern "C" __global__ void spin(const int* flag, int* out) {
    int i = 0;
    while (flag[0] == 0) { i++; }
    out[0] = i;
}
"""


@pytest.fixture(scope="module")
def built():
    """Every kernel of these tests compiled (and the check run once) before a core is crowded."""
    for code, name in ((BUSY, "busy"), (SPIN, "spin"), (HALF_WAIT, "half_wait")):
        kernel(code, name)
    assert run_check("vector_add", SLOW_VECTOR_ADD).passed


@pytest.fixture
def crowded_core(built):
    """The emulator's worker (one OS thread) on one core with HOGS busy loops: a machine several
    times oversubscribed. The worker is started afresh inside, and again after."""
    mask = os.sched_getaffinity(0)
    core = min(mask)
    # Each in its own session, as the worker is: with autogroup scheduling, a session shares as one.
    hogs = [subprocess.Popen(["sh", "-c", "while :; do :; done"], start_new_session=True) for _ in range(HOGS)]
    try:
        for h in hogs:
            os.sched_setaffinity(h.pid, {core})
        os.sched_setaffinity(0, {core})  # the worker and its threads inherit it
        emulator.shutdown()
        yield
    finally:
        os.sched_setaffinity(0, mask)
        for h in hogs:
            h.kill()
            h.wait()
        emulator.shutdown()


def _busy_launch(limit: float):
    out = np.zeros(512, np.float32)
    report = kernel(BUSY, "busy").launch((2, 1, 1), (256, 1, 1), [out, np.int32(BUSY_ITERS)], 0, time_limit=limit)
    assert np.isfinite(out).all() and (out[:256] == out[256:]).all()
    return report


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one core: as many threads either way")
def test_the_worker_runs_as_many_threads_as_the_process_has_cores(crowded_core):
    # Not os.cpu_count(): more threads than the cores one may use only take turns.
    kernel(BUSY, "busy").launch((1, 1, 1), (1, 1, 1), [np.zeros(1, np.float32), np.int32(1)], 0)
    assert [w.threads for w in emulator._WORKERS.values()] == [1]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one core: one BLAS thread either way")
def test_numpy_blas_runs_on_one_thread_during_a_check(built, monkeypatch):
    # OpenBLAS's idle threads spin between calls: on a busy machine they burned 3 to 4 times a
    # failing check's own CPU time in its references and mistake models.
    from threadpoolctl import threadpool_info

    seen = []
    launch = emulator.EmulatedKernel.launch

    def watched(self, *args, **kw):
        seen.extend(pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas")
        return launch(self, *args, **kw)

    monkeypatch.setattr(emulator.EmulatedKernel, "launch", watched)
    assert run_check("vector_add", SLOW_VECTOR_ADD).passed
    assert seen and set(seen) == {1}, seen
    assert any(pool["num_threads"] > 1 for pool in threadpool_info() if pool["user_api"] == "blas")  # restored


def test_a_correct_kernel_on_a_crowded_core_finishes_past_its_limit_on_the_clock(crowded_core):
    report = _busy_launch(limit=1.0)
    # The launch took longer on the clock than its limit, but its own work stayed within it.
    assert report.seconds > 1.0 > report.cpu_seconds > 0.05, (report.seconds, report.cpu_seconds)


def test_an_endless_loop_on_a_crowded_core_is_stopped_by_its_cpu_seconds(crowded_core):
    t0 = time.monotonic()
    with pytest.raises(KernelTimeoutError) as info:
        kernel(SPIN, "spin").launch((1, 1, 1), (32, 1, 1), [np.zeros(1, np.int32), np.zeros(1, np.int32)], 0,
                                    time_limit=0.3)
    took = time.monotonic() - t0
    msg = str(info.value)
    assert msg.startswith("spin: stopped after 0.3 s of CPU time (") and "its time limit of 0.3 CPU s" in msg, msg
    wall = float(msg.split("CPU time (")[1].split(" s on the clock")[0])
    assert 0.3 < wall < 0.3 * emulator.WALL_CAP_FACTOR and took < 0.3 * emulator.WALL_CAP_FACTOR, (wall, took)
    assert_healthy()


def test_a_deadlock_on_a_crowded_core_is_named_at_once(crowded_core):
    t0 = time.monotonic()
    with pytest.raises(BarrierError, match="deadlock"):
        kernel(HALF_WAIT, "half_wait").launch((1, 1, 1), (64, 1, 1), [np.zeros(64, np.float32)], 0, time_limit=0.3)
    assert time.monotonic() - t0 < 0.3 * emulator.WALL_CAP_FACTOR


def test_a_kernel_blocked_without_cpu_is_stopped_by_the_wall_clock_cap():
    code = """
    #include <unistd.h>
    extern "C" __global__ void sleeper(int* out) { sleep(60); out[0] = 1; }
    """
    t0 = time.monotonic()
    with pytest.raises(KernelTimeoutError) as info:
        kernel(code, "sleeper").launch((1, 1, 1), (1, 1, 1), [np.zeros(1, np.int32)], 0, time_limit=0.1)
    took = time.monotonic() - t0
    cap = 0.1 * emulator.WALL_CAP_FACTOR
    assert "its wall-clock cap, having used 0.0 s of CPU time (the limit is 0.1 CPU s)" in str(info.value)
    assert cap <= took < cap + 3, took
    assert_healthy()


def test_a_check_on_a_crowded_core_passes_a_correct_kernel_slower_than_its_limit(crowded_core, monkeypatch):
    monkeypatch.setenv("GRADER_CHECK_TIME_LIMIT", "0.5")
    walls = []
    launch = emulator.EmulatedKernel.launch

    def timed(self, *args, **kw):
        report = launch(self, *args, **kw)
        walls.append((report.seconds, report.cpu_seconds))
        return report

    monkeypatch.setattr(emulator.EmulatedKernel, "launch", timed)
    result = run_check("vector_add", SLOW_VECTOR_ADD)
    assert result.passed, result.first_failure.message
    assert max(w for w, _ in walls) > 0.5 > max(c for _, c in walls), walls

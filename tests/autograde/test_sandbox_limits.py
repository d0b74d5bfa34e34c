"""The clean regrade's limits count a check's CPU seconds, its own work, with the wall clock only a
cap far above: a busy machine slows a check down without failing it."""
import os
import signal
import subprocess
import sys
import time

from grader.autograde import sandbox


def test_the_wall_clock_cap_sits_far_above_the_cpu_limit():
    for limits in (sandbox.Limits(), sandbox.Limits(cpu_s=45.5)):
        assert limits.wall_s == limits.cpu_s * sandbox.WALL_CAP_FACTOR >= 10 * limits.cpu_s
        assert limits.rlimits()["cpu_s"] == -(-limits.cpu_s // 1)  # RLIMIT_CPU takes whole seconds
    assert sandbox.Limits(cpu_s=60, wall_s=30).wall_s == 30  # a cap given is kept


def test_a_job_stopped_by_its_cpu_seconds_counts_as_out_of_time():
    spin = "import resource\nresource.setrlimit(resource.RLIMIT_CPU, (1, 3))\nwhile True: pass"
    ended = subprocess.run([sys.executable, "-c", spin], timeout=60)
    assert sandbox._cpu_limit_signal(ended.returncode), ended.returncode
    assert not sandbox._cpu_limit_signal(0) and not sandbox._cpu_limit_signal(-9)


def test_a_job_is_stopped_at_its_cpu_seconds_added_over_all_its_processes():
    # Three busy children, each far below the limit on its own: only their sum reaches it.
    spawn = ("import subprocess, sys, time\n"
             "kids = [subprocess.Popen([sys.executable, '-c', 'while True: pass']) for _ in range(3)]\n"
             "time.sleep(600)")
    proc = subprocess.Popen([sys.executable, "-c", spawn], start_new_session=True)
    t0 = time.monotonic()
    try:
        assert sandbox._wait_within(proc, sandbox.Limits(cpu_s=1.5, wall_s=60), t0)
        took = time.monotonic() - t0
        used = sandbox.job_cpu_seconds(proc.pid)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert used >= 1.5 and took < 30, (used, took)


def test_a_job_that_ends_in_time_is_not_out_of_time():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    assert not sandbox._wait_within(proc, sandbox.Limits(cpu_s=30, wall_s=60), time.monotonic())

"""The clean regrade's limits count a check's CPU seconds, its own work, with the wall clock only a
cap far above: a busy machine slows a check down without failing it."""
import subprocess
import sys

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

"""The clean regrade's sandbox probe: a bwrap probe that timed out (a loaded machine) is not taken
for "this machine cannot make a sandbox", which would grade the rest of the run unisolated."""
import subprocess

from grader.autograde import sandbox


def test_a_bwrap_probe_that_timed_out_is_asked_again(monkeypatch):
    answers = [subprocess.TimeoutExpired("bwrap", 60), subprocess.CompletedProcess([], 0)]

    def run(*args, **kwargs):
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(sandbox.subprocess, "run", run)
    monkeypatch.setattr(sandbox, "_BWRAP_WORKS", {})
    assert sandbox._usable_bwrap("/usr/bin/bwrap") is None
    assert sandbox._usable_bwrap("/usr/bin/bwrap") == "/usr/bin/bwrap"
    assert sandbox._usable_bwrap("/usr/bin/bwrap") == "/usr/bin/bwrap" and not answers  # remembered, not re-run

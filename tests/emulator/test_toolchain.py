"""The emulator's compiler probes: a machine set up with `bash .ci/setup dev` has the whole
toolchain, and one failed probe (a subprocess that timed out while the test workers started) does
not turn the race detector off for the rest of the process: that silently skipped 98 tests and let
a kernel with a missing barrier pass on one CI worker."""
import json
import os

import pytest

from grader.emulator import _toolchain


@pytest.mark.skipif(os.environ.get("GRADER_TESTS_WITHOUT_CLANG") == "1",
                    reason="GRADER_TESTS_WITHOUT_CLANG=1: this machine runs the suite without clang-16")
def test_the_set_up_machine_has_clang_and_boost():
    assert _toolchain.clang(), ("clang++-16 not found: `bash .ci/setup dev` installs it (without it the race, IO and "
                                "cp.async tests skip; set GRADER_TESTS_WITHOUT_CLANG=1 to run the rest knowingly)")
    assert _toolchain.boost_available(), "Boost.Context not found: `bash .ci/setup dev` installs libboost-context-dev"


def test_a_miss_is_probed_again_and_a_find_is_kept():
    answers = iter([None, None, "/usr/bin/clang++-16", None])
    calls = []

    @_toolchain._remember_found
    def probe():
        calls.append(1)
        return next(answers)

    assert [probe(), probe(), probe(), probe()] == [None, None, "/usr/bin/clang++-16", "/usr/bin/clang++-16"]
    assert len(calls) == 3


def test_a_versioned_clang_is_found_without_running_it(monkeypatch, tmp_path):
    fake = tmp_path / "clang++-16"
    fake.write_text("#!/bin/sh\nexit 1\n")  # a probe that ran it would read no version
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert _toolchain.clang.__wrapped__() == str(fake)


def test_a_cold_runtime_build_says_what_it_builds_once_and_how_long_each_piece_took(monkeypatch, tmp_path, capsys):
    from grader.emulator import _build

    monkeypatch.setenv("GRADER_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(_toolchain, "_ANNOUNCED", [])
    built = []

    def compiler(cmd, **kw):  # stands in for g++: makes the file after -o
        out = cmd[cmd.index("-o") + 1]
        open(out, "w").close()
        built.append(os.path.basename(out))
        return _toolchain.subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(_toolchain.subprocess, "run", compiler)
    _build._pch("g++", ["-O2"])
    _toolchain.launcher("ucontext")
    _toolchain.launcher("ucontext")  # built: silent
    said = capsys.readouterr().out.splitlines()
    assert built == ["emu_runtime.hpp.gch", "emu-launcher"]
    assert len(said) == 3 and said[0].startswith("grader: building the CPU emulator's runtime (its launcher and a "
                                               "precompiled header of the CUDA runtime), once for this version")
    assert str(tmp_path) in said[0]
    assert said[1].startswith("grader: built the emulator's precompiled header in ") and said[1].endswith(" s")
    assert said[2].startswith("grader: built the emulator's launcher in ")
    # After a grader update the next build says how long this one took.
    monkeypatch.setattr(_toolchain, "_ANNOUNCED", [])
    monkeypatch.setattr(_toolchain, "runtime_version", lambda: "next-version")
    _toolchain.launcher("ucontext")
    took = sum(json.loads((tmp_path / _toolchain.BUILD_TIMES).read_text()).values())
    assert f"once for this version of the grader: the last build on this machine took {took:.0f} s." in \
        capsys.readouterr().out

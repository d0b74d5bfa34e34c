"""Fixtures for the emulator's math headers: compile C++ against grader/emulator/include with g++."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
INCLUDE = HERE.parents[1] / "grader" / "emulator" / "include"
FLAGS = ["-std=c++20", "-Wall", "-Wextra", "-Wpedantic", "-Werror", f"-I{INCLUDE}"]


@pytest.fixture(scope="session")
def gxx() -> str:
    """The compiler under test: g++, or $EMU_MATH_CXX (e.g. clang++-16, which the emulator also uses)."""
    name = os.environ.get("EMU_MATH_CXX", "g++")
    cxx = shutil.which(name)
    if cxx is None:
        pytest.skip(f"{name} is not installed")
    return cxx


@pytest.fixture(scope="session")
def clang() -> str:
    """clang++ 16 or newer, which the emulator uses for its IO-counting builds."""
    for name in ("clang++-16", "clang++"):
        cxx = shutil.which(name)
        if cxx is not None:
            out = subprocess.run([cxx, "-dumpversion"], capture_output=True, text=True).stdout
            if out.split(".")[0].isdigit() and int(out.split(".")[0]) >= 16:
                return cxx
    pytest.skip("clang++ >= 16 is not installed")


def _compile(cxx: str, sources: list[Path], out: Path | None, *flags: str) -> None:
    """Compile (and link, when out is given) or only syntax-check the sources; fail with the compiler's output."""
    cmd = [cxx, *FLAGS, *flags, *map(str, sources)]
    cmd += ["-o", str(out)] if out is not None else ["-fsyntax-only"]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, f"{' '.join(cmd)}\n{res.stderr}"


@pytest.fixture(scope="session")
def compile_cpp():
    """compile_cpp(cxx, sources, out, *flags): see _compile (a fixture, so tests need not import conftest)."""
    return _compile


@pytest.fixture(scope="session")
def emu_include() -> Path:
    return INCLUDE


@pytest.fixture(scope="session")
def probe(gxx, tmp_path_factory):
    """probe(op, records, out_dtype, ncols): run probe.cpp's OP on the records (a NumPy array,
    one record per element) and return its results as an array of shape (len(records), ncols)."""
    exe = tmp_path_factory.mktemp("probe") / "probe"
    _compile(gxx, [HERE / "probe.cpp"], exe, "-O2")

    def run(op: str, records: np.ndarray, out_dtype, ncols: int) -> np.ndarray:
        res = subprocess.run([str(exe), op], input=np.ascontiguousarray(records).tobytes(), capture_output=True)
        assert res.returncode == 0, res.stderr.decode()
        out = np.frombuffer(res.stdout, dtype=out_dtype)
        return out.reshape(len(records), ncols)

    return run

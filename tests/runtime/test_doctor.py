"""`python -m grader doctor`: one line per item, the install command for what is missing, and a
non-zero exit when something required is missing."""
import subprocess
import sys

from grader import doctor
from grader import emulator

NAMES = ("python", "grader", "backend", "g++", "Boost.Context", "clang-16", "NVRTC", "CuPy/GPU", "Triton",
         "nbgrader", "JupyterLab", "alembic on PATH", "bubblewrap")


def test_every_item_is_listed_once():
    items = doctor.diagnose()
    assert [i.name for i in items] == list(NAMES)
    text = doctor.report(items)
    for name in NAMES:
        assert sum(line.split()[1:2] == [name.split()[0]] for line in text.splitlines()) >= 1, name


def test_missing_required_tools_fail_with_their_install_command(monkeypatch):
    monkeypatch.setenv("GRADER_BACKEND", "cpu")
    from grader.backend import set_backend

    set_backend("cpu")
    monkeypatch.setattr(emulator, "gxx", lambda: None)
    monkeypatch.setattr(emulator, "clang", lambda: None)
    monkeypatch.setattr(emulator, "boost_available", lambda: False)
    items = {i.name: i for i in doctor.diagnose()}
    assert items["g++"].status == doctor.MISSING and "apt-get install g++" in items["g++"].fix
    assert items["clang-16"].status == doctor.MISSING and "apt-get install clang-16" in items["clang-16"].fix
    assert "count_io" in items["clang-16"].detail and "race detector" in items["clang-16"].detail
    assert items["Boost.Context"].status == doctor.ABSENT  # optional: slower fibers only
    assert "apt-get install libboost-context-dev" in items["Boost.Context"].fix
    assert doctor.main() == 1
    set_backend(None)


def test_command_line_exit_status():
    out = subprocess.run([sys.executable, "-m", "grader", "doctor"], capture_output=True, text=True)
    lines = out.stdout.strip().splitlines()
    assert any(line.split()[:2] == ["ok", "python"] for line in lines)
    required_missing = any(line.startswith("MISSING") for line in lines)
    assert out.returncode == (1 if required_missing else 0), out.stdout


def test_missing_triton_names_the_extra(monkeypatch):
    real = doctor._installed
    monkeypatch.setattr(doctor, "_installed", lambda name: None if name == "triton" else real(name))
    item = next(i for i in doctor.diagnose() if i.name == "Triton")
    assert item.status == doctor.ABSENT and "module 12" in item.detail and "'.[triton]'" in item.fix

"""Shared fixtures. The tree: a folder per layer (emulator/, runtime/, checks/, autograde/, course/,
browser/) and one per course module for what belongs to that module alone (modules/mNN/). Kernel
tests run on every backend this machine has: always the CPU emulator, and the GPU too where CuPy
sees one (the device tool's H200)."""
import sys
from pathlib import Path

import numpy as np
import pytest

import grader

# Shared test helpers (repo_scripts, nbgrader_cells) live here, above the per-module folders.
sys.path.insert(0, str(Path(__file__).resolve().parent))

BACKENDS = ["cpu"] + (["gpu"] if grader.gpu_status()[0] else [])


@pytest.fixture(params=BACKENDS)
def backend(request):
    previous = grader.backend()
    grader.set_backend(request.param)
    yield request.param
    grader.set_backend(previous)


@pytest.fixture(autouse=True)
def no_visible_passes_kept(monkeypatch):
    """Each test starts with no visible passes kept by an earlier test's check (grader.checks keeps
    them for the next hidden check of the same kernel): what a test launches is its own doing."""
    import grader.checks

    monkeypatch.setattr(grader.checks, "_PASSED_VISIBLE", {})


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture
def on_emulator():
    """The emulator for this test, whatever backend the machine would pick."""
    previous = grader.backend()
    grader.set_backend("cpu")
    yield
    grader.set_backend(previous)


# pytest runs on every core (pyproject: -n auto --dist loadgroup). The tests of these files share
# a fixture that costs seconds to minutes (a graded class, a course, a browser): each file's tests
# stay on one worker, and the fixture is session-scoped, because the worker may run other files'
# tests between them and a module-scoped fixture would be torn down and built again.
ONE_WORKER = {"test_autograde_clean.py", "test_autograde.py", "test_instructor_config.py", "test_student_bundle.py",
              "test_nbgrader_stub.py", "test_feedback_mathjax.py", "test_jupyterlab.py"}


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the group into the node id
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in ONE_WORKER:
            item.add_marker(pytest.mark.xdist_group(item.path.parent.name + "/" + item.path.name))

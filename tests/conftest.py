"""Shared fixtures. Kernel tests run on every backend this machine has: always the CPU
emulator, and the GPU too where CuPy sees one (the device tool's H100)."""
import numpy as np
import pytest

import grader

BACKENDS = ["cpu"] + (["gpu"] if grader.gpu_status()[0] else [])


@pytest.fixture(params=BACKENDS)
def backend(request):
    previous = grader.backend()
    grader.set_backend(request.param)
    yield request.param
    grader.set_backend(previous)


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
# a module- or session-scoped fixture that costs seconds to a minute (a graded class, a course, a
# browser): each file's tests stay on one worker, so the fixture is built once.
ONE_WORKER = {"test_autograde_clean.py", "test_autograde.py", "test_instructor_config.py", "test_student_bundle.py",
              "test_nbgrader_stub.py", "test_feedback_mathjax.py", "test_jupyterlab.py"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in ONE_WORKER:
            item.add_marker(pytest.mark.xdist_group(item.path.parent.name + "/" + item.path.name))

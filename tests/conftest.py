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

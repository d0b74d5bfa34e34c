import importlib

import numpy as np
import pytest

import grader
from grader.errors import BackendUnavailableError


def test_env_forces_cpu(monkeypatch):
    monkeypatch.setenv("GRADER_BACKEND", "cpu")
    assert grader.set_backend(None) == "cpu"
    assert grader.xp is np


def test_asking_for_a_missing_gpu_is_an_error_not_a_fallback(monkeypatch):
    monkeypatch.setattr(importlib.import_module("grader.backend"), "gpu_status", lambda: (False, "no device here"))
    with pytest.raises(BackendUnavailableError, match="no device here"):
        grader.set_backend("gpu")
    assert grader.set_backend("cpu") == "cpu"


def test_unknown_backend_name(monkeypatch):
    with pytest.raises(BackendUnavailableError, match="choose 'gpu', 'cpu' or 'auto'"):
        grader.set_backend("tpu")


def test_poisoned_allocation_shows_unwritten_elements(backend):
    x = grader.empty((3, 4))
    assert x.dtype == np.float32 and np.isnan(grader.to_host(x)).all()
    assert grader.never_written(x).all()
    x[1, 2] = np.nan  # a NaN the kernel computed is not mistaken for "never written"
    assert grader.never_written(x).sum() == 11
    i = grader.to_host(grader.empty(5, np.int32))
    assert (i == -1).all()
    u = grader.to_host(grader.empty(2, np.uint8))
    assert (u == 255).all()


def test_round_trip_keeps_values_and_makes_contiguous_copies(backend):
    host = np.arange(12, dtype=np.float32).reshape(3, 4).T
    dev = grader.to_device(host)
    assert dev.flags.c_contiguous and grader.is_device_array(dev)
    back = grader.to_host(dev)
    np.testing.assert_array_equal(back, host)
    assert grader.to_device([1, 2]).dtype == np.float32


def test_import_needs_only_numpy():
    import subprocess
    import sys

    code = "import sys, grader; heavy = [m for m in ('IPython', 'matplotlib', 'nbgrader', 'jupyter_core', 'cupy') if m in sys.modules]; print(heavy)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env={"GRADER_BACKEND": "cpu", "PATH": ""})
    assert out.stdout.strip() == "[]"

"""Shared helpers: every test here runs under both fiber back ends."""
from __future__ import annotations

import pytest

from grader import emulator
from grader.emulator import _toolchain

ok, why = emulator.available()
if not ok:
    pytest.skip(f"CPU emulator unavailable: {why}", allow_module_level=True)

_BACKENDS = [pytest.param("boost", marks=pytest.mark.skipif(not _toolchain.boost_available(),
                                                               reason="libboost-context-dev not installed")),
             "ucontext"]


@pytest.fixture(autouse=True, params=_BACKENDS)
def fibers(request, monkeypatch):
    monkeypatch.setenv("GRADER_EMULATOR_FIBERS", request.param)
    return request.param

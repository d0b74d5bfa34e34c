"""Build the run's shared emulator pieces (launcher, precompiled header) before any student code.

Runs in the sandbox like a check, but with the run's cache writable; afterwards every check
sees that cache read-only, with a private, empty ``kernels/`` folder on top."""
from __future__ import annotations

import numpy as np

WARM_KERNEL = 'extern "C" __global__ void warm_up(float* x, int n) { int i = threadIdx.x; if (i < n) x[i] = 1.0f; }\n'


def warm() -> dict:
    from grader.backend import set_backend
    from grader.kernel import RawKernel

    be = set_backend("cpu")
    k = RawKernel(WARM_KERNEL, "warm_up", backend=be)
    x = np.zeros(4, np.float32)
    k(1, 4, (x, np.int32(4)))
    return {"status": "warm", "ok": bool((x == 1).all())}

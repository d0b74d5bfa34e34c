"""setmaxnreg, elect-one and stmatrix on the emulator: exact results, and the warpgroup rules named."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from emulator_helpers import KERNELS, assert_healthy, kernel
from grader.errors import CompileError, KernelFault

sys.path.insert(0, str(KERNELS / "hopper"))
import hopper_cases as cases  # noqa: E402

CASES = cases.roles_cases()


@pytest.mark.parametrize("index", range(len(CASES)), ids=[c.id for c in CASES])
@pytest.mark.parametrize("race_check", [False, True], ids=["normal", "race-checked"])
def test_exact(index, race_check):
    c = CASES[index]
    args = [a.copy() if isinstance(a, np.ndarray) else a for a in c.args]
    kernel(c.source, c.kernel).launch(c.grid, c.block, args, c.shared_mem, race_check=race_check)
    np.testing.assert_array_equal(args[0], c.expected[0])


def test_setmaxnreg_not_uniform_in_a_warpgroup():
    code = """
    extern "C" __global__ void __launch_bounds__(128, 1) k(float* out) {
        if (threadIdx.x < 64) setmaxnreg_dec<40>(); else setmaxnreg_dec<48>();
        out[threadIdx.x] = 1.0f;
    }
    """
    with pytest.raises(KernelFault) as info:
        kernel(code, "k").launch((1, 1, 1), (128, 1, 1), [np.zeros(128, np.float32)], 0)
    assert ("setmaxnreg_dec: thread (0,0,0) asks for 40 registers, thread (64,0,0) for 48: every thread of "
            "warpgroup 0 must execute the same setmaxnreg") in str(info.value)
    assert_healthy()


def test_setmaxnreg_out_of_range_does_not_compile():
    code = """
    extern "C" __global__ void k(float* out) { setmaxnreg_inc<260>(); out[0] = 1.0f; }
    """
    with pytest.raises(CompileError) as info:
        kernel(code, "k")
    assert "setmaxnreg_inc<N>: N is 24..256, a multiple of 8" in str(info.value)


def test_stmatrix_outside_shared_memory():
    code = """
    extern "C" __global__ void k(unsigned short* out) {
        unsigned r[1] = {0};
        stmatrix_x1(out + 8 * threadIdx.x, r);
    }
    """
    with pytest.raises(KernelFault) as info:
        kernel(code, "k").launch((1, 1, 1), (32, 1, 1), [np.zeros(256, np.uint16)], 0)
    assert "stmatrix_x1: lane 0's row (16 bytes at" in str(info.value)
    assert "is not in shared memory (it points into an array argument, global memory); stmatrix writes only __shared__ memory" in str(info.value)
    assert_healthy()

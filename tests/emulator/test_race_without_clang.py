"""Without clang-16 the race detector cannot run: race_check=True still compares two schedules,
but a difference is reported as what it is, with the install command, never as a guessed cause
(a per-head indexing bug used to read as "a missing __syncthreads()")."""
from __future__ import annotations

import numpy as np
import pytest

from emulator_helpers import assert_healthy, kernel
from grader.emulator import RACE_DETECTOR_MISSING, _toolchain
from grader.errors import RaceConditionError

# One block, a row of threads per head; the output index forgets the head, so every head writes
# row 0's slots. One block runs its threads in a fixed order (reversed in the second schedule), so
# the two schedules differ every time.
PER_HEAD_BUG = """
extern "C" __global__ void per_head(const float* x, float* out, int n) {
    int head = threadIdx.y;
    int i = threadIdx.x;
    if (i < n) out[i] = x[head * n + i] * 2.0f;   // should be out[head * n + i]
}
"""


@pytest.fixture
def no_clang(monkeypatch):
    monkeypatch.setattr(_toolchain, "clang", lambda: None)


def test_schedule_difference_without_clang_names_the_missing_tool_not_a_cause(no_clang):
    k = kernel(PER_HEAD_BUG, "per_head")
    n, heads = 32, 8
    x = np.arange(heads * n, dtype=np.float32)
    out = np.zeros(heads * n, np.float32)
    with pytest.raises(RaceConditionError) as info:
        k.launch((1, 1, 1), (n, heads, 1), (x, out, np.int32(n)), 0, race_check=True)
    assert_healthy()
    err = info.value
    text = str(err)
    assert "race check unavailable: install clang-16 (apt-get install clang-16)" in text
    assert RACE_DETECTOR_MISSING in text
    assert "__syncthreads" not in text  # no guessed fix
    assert "out[" in text  # what was seen: the element that differs
    assert err.explained  # the checks add no "missing __syncthreads()" hint either


def test_a_correct_kernel_passes_race_check_without_clang(no_clang):
    fixed = PER_HEAD_BUG.replace("out[i] =", "out[head * n + i] =")
    k = kernel(fixed, "per_head")
    n, heads = 32, 8
    x = np.arange(heads * n, dtype=np.float32)
    out = np.zeros(heads * n, np.float32)
    k.launch((1, 1, 1), (n, heads, 1), (x, out, np.int32(n)), 0, race_check=True)
    assert np.array_equal(out, 2 * x)

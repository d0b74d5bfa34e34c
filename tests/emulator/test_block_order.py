"""course.cuh's heaviest_first on the emulator: every (head, block) exactly once, in the order the
capstone's causal kernels rely on (the heaviest block of each head of a group first)."""
from __future__ import annotations

import numpy as np
import pytest

from emulator_helpers import kernel

GROUP_BYTES = 1 << 20  # given with -D: the test does not depend on course.cuh's default
ORDER = """
extern "C" __global__ void order(int* out, long long head_bytes, int heaviest_last) {
    int bh = blockIdx.z * gridDim.y + blockIdx.y, x = blockIdx.x;
    heaviest_first((size_t)head_bytes, heaviest_last != 0, bh, x);
    const int lin = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    if (threadIdx.x == 0) out[2 * lin] = bh, out[2 * lin + 1] = x;
}
"""


def intended(blocks, heads, group, heaviest_last):
    """The order spelled out: per group of heads, the heaviest block of each head, then the next."""
    order = []
    for first in range(0, heads, group):
        for rank in range(blocks):
            for bh in range(first, min(first + group, heads)):
                order.append((bh, blocks - 1 - rank if heaviest_last else rank))
    return order


@pytest.mark.parametrize("heaviest_last", [True, False])
@pytest.mark.parametrize("blocks, H, B, group", [
    (5, 7, 1, 3),    # groups of 3, 3 and 1 heads
    (4, 3, 2, 2),    # heads across batch entries
    (6, 2, 2, 1),    # one head at a time (K and V of one head over the budget)
    (3, 4, 2, 8),    # every head in one group
])
def test_each_block_once_in_the_intended_order(blocks, H, B, group, heaviest_last):
    out = np.full(2 * blocks * H * B, -1, np.int32)
    head_bytes = GROUP_BYTES // group if group < H * B else 1
    kernel(ORDER, "order", (f"-DHEAD_GROUP_BYTES={GROUP_BYTES}",)).launch((blocks, H, B), (32, 1, 1), [out, np.int64(head_bytes), np.int32(heaviest_last)], 0)
    got = [tuple(p) for p in out.reshape(-1, 2).tolist()]
    assert got == intended(blocks, H * B, min(group, H * B), heaviest_last)

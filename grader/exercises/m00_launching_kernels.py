"""00_launching_kernels: threads, blocks and grids."""
import numpy as np

from ..exercise_rows import Mistake, case, exercise, hidden
from ..launch import ceil_div

MODULE = "00_launching_kernels"
F32 = np.float32



exercise(
    id="vector_add",
    hidden_sizes={"n": 256},
    module=MODULE,
    nan_causes="",
    kernel="vector_add",
    signature="vector_add(const float* a, const float* b, float* c, int n)",
    launch_shape="grid = ceil_div(n, 256) blocks, block = 256 threads; thread i handles c[i]",
    make_inputs=lambda p, rng: dict(a=rng.standard_normal(p.n).astype(F32), b=rng.standard_normal(p.n).astype(F32)),
    outputs=dict(c=lambda p: ((p.n,), F32)),
    reference=lambda p, x: dict(c=x["a"].astype(np.float64) + x["b"]),
    args=lambda p, a: (a.a, a.b, a.c, np.int32(p.n)),
    grid=lambda p: ceil_div(p.n, 256),
    block=lambda p: 256,
    cases=[
        case("one_element", n=1, seed=1),
        case("one_block", n=256, seed=2),
        case("block_minus_one", n=255, seed=3),
        case("block_plus_one", n=257, seed=4),
        case("many_blocks", n=5000, seed=5),
        hidden("odd_size", n=1237),
        hidden("exact_blocks", n=1024),
        hidden("past_2_24", n=2**24 + 3),  # an index held in a float skips elements from 2^24 on
    ],
    mistakes=[
        Mistake("subtracted instead of added", "c[i] should be a[i] + b[i].",
                lambda p, x: dict(c=x["a"].astype(np.float64) - x["b"])),
    ],
)


def _row_scale_ref(p, x):
    return dict(y=x["x"].astype(np.float64) * x["s"].astype(np.float64)[:, None])


exercise(
    id="row_scale",
    hidden_sizes={"rows": 16, "cols": 16},
    module=MODULE,
    nan_causes="",
    kernel="row_scale",
    signature="row_scale(const float* x, const float* s, float* y, int rows, int cols)",
    launch_shape="block = (16, 16), grid = (ceil_div(cols, 16), ceil_div(rows, 16)); "
    "threadIdx.x/blockIdx.x walk columns, threadIdx.y/blockIdx.y walk rows; y[r*cols + c] = s[r] * x[r*cols + c]",
    make_inputs=lambda p, rng: dict(x=rng.standard_normal((p.rows, p.cols)).astype(F32),
                                    s=rng.uniform(0.5, 2.0, p.rows).astype(F32)),
    outputs=dict(y=lambda p: ((p.rows, p.cols), F32)),
    reference=_row_scale_ref,
    args=lambda p, a: (a.x, a.s, a.y, np.int32(p.rows), np.int32(p.cols)),
    grid=lambda p: (ceil_div(p.cols, 16), ceil_div(p.rows, 16)),
    block=lambda p: (16, 16),
    cases=[
        case("one_tile", rows=16, cols=16, seed=1),
        case("single_row", rows=1, cols=40, seed=2),
        case("tall", rows=50, cols=3, seed=3),
        case("wide_ragged", rows=17, cols=33, seed=4),
        hidden("square_ragged", rows=31, cols=31),
        hidden("large", rows=100, cols=70),
        hidden("past_2_24", rows=4099, cols=4097),  # flat indices past 2^24: a float index skips elements
    ],
    mistakes=[
        Mistake("scaled by the column's factor", "each row r is multiplied by s[r]; index s with the row, not the column.",
                lambda p, x: dict(y=x["x"].astype(np.float64) * x["s"].astype(np.float64)[None, : p.cols])
                if p.cols <= p.rows else None),
    ],
)

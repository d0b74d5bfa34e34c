"""02_tiled_matmul: naive and shared-memory tiled matmul, and Q K^T without a transpose."""
import numpy as np

from .. import reference as ref
from ..exercise_rows import PRODUCT_NAN, Mistake, case, exercise, hidden
from ..launch import ceil_div

MODULE = "02_tiled_matmul"
F32 = np.float32



def _ab(p, rng):
    return dict(A=rng.standard_normal((p.M, p.K)).astype(F32), B=rng.standard_normal((p.K, p.N)).astype(F32))


MATMUL_CASES = [
    case("tiny", M=2, N=3, K=4, seed=1),
    case("one_tile", M=16, N=16, K=16, seed=2),
    case("tile_minus_one", M=15, N=15, K=15, seed=3),
    case("tile_plus_one", M=17, N=17, K=17, seed=4),
    case("rectangular", M=50, N=70, K=33, seed=5),
    case("sizes_127_128_129", M=127, N=129, K=128, seed=6),
    case("deep_and_narrow", M=20, N=5, K=90, seed=7),
    hidden("single_row", M=1, N=40, K=100),
    hidden("wide_and_shallow", M=40, N=100, K=3),
    hidden("ragged", M=65, N=31, K=47),
]

# On the emulator the race check runs one case (race_case) under the race detector and a second
# schedule. A missing second __syncthreads() only races when the loop makes at least two steps
# along K (the next tile overwrites the current one), so the tiled exercises name a two-tile case.
TILED_CASES = MATMUL_CASES
RACE_CASE = "tile_plus_one"


def _only_first_k_tile(p, x):
    """What a tiled kernel returns if its loop over K stops after the first tile."""
    k = min(p.K, 16)
    return dict(C=ref.matmul(x["A"][:, :k], x["B"][:k])) if p.K > 16 else None


def _k_loop_over_n(p, x):
    """What a tiled kernel returns if its loop over K runs ceil_div(N, 16) times instead."""
    k = ceil_div(p.N, 16) * 16
    return dict(C=ref.matmul(x["A"][:, :k], x["B"][:k])) if p.K > k else None


def _b_tiles_transposed(p, x):
    """What a tiled kernel returns if it swaps threadIdx.x and threadIdx.y in the load of B:
    every 16 x 16 tile of B (zero-padded at the edges) is used transposed."""
    T, kp, np_ = 16, ceil_div(p.K, 16) * 16, ceil_div(p.N, 16) * 16
    padded = np.zeros((kp, np_))
    padded[: p.K, : p.N] = x["B"]
    tiles = padded.reshape(kp // T, T, np_ // T, T).transpose(0, 3, 2, 1).reshape(kp, np_)
    a = np.zeros((p.M, kp))
    a[:, : p.K] = x["A"]
    return dict(C=ref.matmul(a, tiles)[:, : p.N])


def _matmul(kernel, launch_shape, race_check, cases, tiled_mistakes=()):
    race_case = RACE_CASE if race_check else None
    exercise(
        id=kernel,
        hidden_sizes={"M": 16, "N": 16, "K": 16},
        module=MODULE,
        nan_causes=PRODUCT_NAN,
        kernel=kernel,
        signature=f"{kernel}(const float* A, const float* B, float* C, int M, int N, int K)",
        launch_shape=launch_shape,
        make_inputs=_ab,
        outputs=dict(C=lambda p: ((p.M, p.N), F32)),
        reference=lambda p, x: dict(C=ref.matmul(x["A"], x["B"])),
        magnitude=lambda p, x: dict(C=ref.matmul(np.abs(x["A"]), np.abs(x["B"]))),
        args=lambda p, a: (a.A, a.B, a.C, np.int32(p.M), np.int32(p.N), np.int32(p.K)),
        grid=lambda p: (ceil_div(p.N, 16), ceil_div(p.M, 16)),
        block=lambda p: (16, 16),
        cases=cases,
        race_check=race_check,
        race_case=race_case,
        mistakes=[
            Mistake("only the first tile along K", "loop over all ceil_div(K, TILE) tiles, not just the first.",
                    _only_first_k_tile),
            *tiled_mistakes,
        ],
    )


_matmul("matmul_naive", "block = (16, 16), grid = (ceil_div(N, 16), ceil_div(M, 16)); thread (x, y) computes C[row*N + col], row from y, col from x", False, MATMUL_CASES)
_matmul("matmul_tiled", "as matmul_naive, with 16 x 16 tiles of A and B staged in __shared__ memory; any M, N, K", True, TILED_CASES,
        tiled_mistakes=[
            Mistake("tile loop runs over N instead of K", "the loop over tiles walks the shared dimension K "
                    "(the sum over k): ceil_div(K, TILE) phases, not ceil_div(N, TILE).", _k_loop_over_n),
            Mistake("each tile of B loaded transposed",
                    "the thread (tx, ty) loads B[t*TILE + ty][col] into Bs[ty][tx]: threadIdx.x picks the column.",
                    _b_tiles_transposed),
        ])


def _scale(p):
    return F32(getattr(p, "scale", 1.0 / np.sqrt(p.d)))


def _phases_over_n(p, x):
    """What a tiled Q K^T kernel computes when its loop over tiles of the head dimension runs
    ceil_div(N, TILE) times instead of ceil_div(d, TILE): only the first 16*ceil(N/16) features."""
    k = ceil_div(p.N, 16) * 16
    if k >= p.d:
        return None
    return dict(S=ref.scaled_scores(x["Q"][:, :k], x["K"][:, :k], float(_scale(p))))


exercise(
    id="qk_scores_tiled",
    hidden_sizes={"N": 16, "d": 8},
    module=MODULE,
    nan_causes=PRODUCT_NAN,
    kernel="qk_scores_tiled",
    signature="qk_scores_tiled(const float* Q, const float* K, float* S, int N, int d, float scale)",
    launch_shape="block = (16, 16), grid = (ceil_div(N, 16), ceil_div(N, 16)); tiles of Q and K in shared memory, "
    "K read row-wise as the columns of K^T (no transposed copy)",
    make_inputs=lambda p, rng: dict(Q=rng.standard_normal((p.N, p.d)).astype(F32), K=rng.standard_normal((p.N, p.d)).astype(F32)),
    outputs=dict(S=lambda p: ((p.N, p.N), F32)),
    reference=lambda p, x: dict(S=ref.scaled_scores(x["Q"], x["K"], float(_scale(p)))),
    args=lambda p, a: (a.Q, a.K, a.S, np.int32(p.N), np.int32(p.d), _scale(p)),
    grid=lambda p: (ceil_div(p.N, 16), ceil_div(p.N, 16)),
    block=lambda p: (16, 16),
    race_check=True,
    race_case="odd_head_dim",  # two tiles along d: a missing second barrier races there
    cases=[
        case("odd_head_dim", N=40, d=24, seed=4),
        case("tiny", N=3, d=2, seed=1),
        case("one_tile", N=16, d=16, seed=2),
        case("tile_plus_one", N=129, d=64, seed=3),
        case("fewer_keys_than_dims", N=10, d=72, seed=5),  # N < d: a phase loop bounded by N stops short
        case("other_scale", N=20, d=24, scale=0.7, seed=6),
        hidden("ragged", N=77, d=48),
        hidden("short_and_deep", N=17, d=100, scale=0.3),
    ],
    magnitude=lambda p, x: dict(S=abs(float(_scale(p))) * (np.abs(x["Q"]).astype(np.float64) @ np.abs(x["K"]).T)),
    mistakes=[
        Mistake("tile loop runs over N instead of d", "the loop over tiles of Q K^T walks the head dimension: "
                "ceil_div(d, TILE) phases (the sum over k < d), not ceil_div(N, TILE).", _phases_over_n),
        Mistake("scale computed from d instead of the scale argument",
                "multiply by the kernel's `scale` argument: the caller may pass any scale, not only 1/sqrt(d).",
                lambda p, x: dict(S=ref.scaled_scores(x["Q"], x["K"], float(F32(1 / np.sqrt(p.d)))))
                if not np.isclose(float(_scale(p)), 1 / np.sqrt(p.d)) else None),
        Mistake("scale never applied", "multiply each dot product by scale.",
                lambda p, x: dict(S=ref.scaled_scores(x["Q"], x["K"], 1.0))),
        Mistake("K read as if it were K^T stored d x N",
                "K is stored N x d, so K^T[k][j] = K[j*d + k]; index K by rows, never k*N + j.",
                lambda p, x: dict(S=ref.scaled_scores(x["Q"], x["K"].reshape(p.d, p.N).T, float(_scale(p))))),
        Mistake("only the first tile along d", "loop over all ceil_div(d, TILE) tiles of the head dimension.",
                lambda p, x: dict(S=ref.scaled_scores(x["Q"][:, :16], x["K"][:, :16], float(_scale(p)))) if p.d > 16 else None),
    ],
)

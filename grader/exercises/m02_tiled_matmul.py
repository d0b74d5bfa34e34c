"""02_tiled_matmul: naive and shared-memory tiled matmul, and Q K^T without a transpose."""
import numpy as np

from .. import reference as ref
from ..checks import Mistake, case, exercise, hidden
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
    hidden("single_row", M=1, N=40, K=100),
    hidden("ragged", M=65, N=31, K=47),
]

# On the emulator the race check runs the *first* visible case under a second schedule. A
# missing second __syncthreads() only races when the loop makes at least two steps along K
# (the next tile overwrites the current one), so the tiled exercises put a two-tile case first.
TILED_CASES = sorted(MATMUL_CASES, key=lambda c: c.name != "tile_plus_one")  # stable: the rest keep their order


def _only_first_k_tile(p, x):
    """What a tiled kernel returns if its loop over K stops after the first tile."""
    k = min(p.K, 16)
    return dict(C=ref.matmul(x["A"][:, :k], x["B"][:k])) if p.K > 16 else None


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
    exercise(
        id=kernel,
        module=MODULE,
        kernel=kernel,
        signature=f"{kernel}(const float* A, const float* B, float* C, int M, int N, int K)",
        launch_shape=launch_shape,
        make_inputs=_ab,
        outputs=dict(C=lambda p: ((p.M, p.N), F32)),
        reference=lambda p, x: dict(C=ref.matmul(x["A"], x["B"])),
        args=lambda p, a: (a.A, a.B, a.C, np.int32(p.M), np.int32(p.N), np.int32(p.K)),
        grid=lambda p: (ceil_div(p.N, 16), ceil_div(p.M, 16)),
        block=lambda p: (16, 16),
        cases=cases,
        race_check=race_check,
        mistakes=[
            Mistake("only the first tile along K", "loop over all ceil_div(K, TILE) tiles, not just the first.",
                    _only_first_k_tile),
            *tiled_mistakes,
        ],
    )


_matmul("matmul_naive", "block = (16, 16), grid = (ceil_div(N, 16), ceil_div(M, 16)); thread (x, y) computes C[row*N + col], row from y, col from x", False, MATMUL_CASES)
_matmul("matmul_tiled", "as matmul_naive, with 16 x 16 tiles of A and B staged in __shared__ memory; any M, N, K", True, TILED_CASES,
        tiled_mistakes=[
            Mistake("each tile of B loaded transposed",
                    "the thread (tx, ty) loads B[t*TILE + ty][col] into Bs[ty][tx]: threadIdx.x picks the column.",
                    _b_tiles_transposed),
        ])


def _scale(p):
    return F32(1.0 / np.sqrt(p.d))


exercise(
    id="qk_scores_tiled",
    module=MODULE,
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
    cases=[  # first: the race-checked case, two tiles along d (see TILED_CASES)
        case("odd_head_dim", N=40, d=24, seed=4),
        case("tiny", N=3, d=2, seed=1),
        case("one_tile", N=16, d=16, seed=2),
        case("tile_plus_one", N=129, d=64, seed=3),
        hidden("ragged", N=77, d=48),
    ],
    mistakes=[
        Mistake("scale never applied", "multiply each dot product by scale.",
                lambda p, x: dict(S=ref.scaled_scores(x["Q"], x["K"], 1.0))),
        Mistake("K read as if it were K^T stored d x N",
                "K is stored N x d, so K^T[k][j] = K[j*d + k]; index K by rows, never k*N + j.",
                lambda p, x: dict(S=ref.scaled_scores(x["Q"], x["K"].reshape(p.d, p.N).T, float(_scale(p))))),
        Mistake("only the first tile along d", "loop over all ceil_div(d, TILE) tiles of the head dimension.",
                lambda p, x: dict(S=ref.scaled_scores(x["Q"][:, :16], x["K"][:, :16], float(_scale(p)))) if p.d > 16 else None),
    ],
)

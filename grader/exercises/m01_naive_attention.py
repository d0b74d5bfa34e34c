"""01_naive_attention: scores, softmax and PV as three kernels, S and P in global memory."""
import numpy as np

from .. import reference as ref
from ..exercise_rows import Mistake, case, exercise, hidden
from ..launch import ceil_div

MODULE = "01_naive_attention"
F32 = np.float32



def _qk(p, rng, heads=None):
    shape = (p.N, p.d) if heads is None else (heads, p.N, p.d)
    big = getattr(p, "logit_scale", 1.0)
    return dict(Q=(rng.standard_normal(shape) * big).astype(F32), K=rng.standard_normal(shape).astype(F32))


def _scale(p):
    return F32(getattr(p, "scale", 1.0 / np.sqrt(p.d)))


def _score_size(p, x):
    """scale * sum_k |q_ik k_jk|: the size of the terms of each score (the tolerance scales with it)."""
    q, k = np.abs(np.asarray(x["Q"], np.float64)), np.abs(np.asarray(x["K"], np.float64))
    return dict(S=abs(float(_scale(p))) * (q @ np.swapaxes(k, -1, -2)))


def _scale_from_d(p, x):
    """What a kernel computes with 1/sqrt(d) instead of its scale argument."""
    if np.isclose(float(_scale(p)), 1.0 / np.sqrt(p.d)):
        return None
    return dict(S=ref.scaled_scores(x["Q"], x["K"], float(F32(1.0 / np.sqrt(p.d)))))


SCALE_FROM_D = Mistake("scale computed from d instead of the scale argument",
                       "multiply by the kernel's `scale` argument: the caller may pass any scale, not only 1/sqrt(d).",
                       _scale_from_d)


exercise(
    id="attn_scores",
    hidden_sizes={"N": 16, "d": 8},
    module=MODULE,
    kernel="attn_scores",
    signature="attn_scores(const float* Q, const float* K, float* S, int N, int d, float scale)",
    launch_shape="block = (16, 16), grid = (ceil_div(N, 16), ceil_div(N, 16)); thread (x, y) computes "
    "S[i*N + j] with i = query row (y), j = key column (x)",
    make_inputs=lambda p, rng: _qk(p, rng),
    outputs=dict(S=lambda p: ((p.N, p.N), F32)),
    reference=lambda p, x: dict(S=ref.scaled_scores(x["Q"], x["K"], float(_scale(p)))),
    args=lambda p, a: (a.Q, a.K, a.S, np.int32(p.N), np.int32(p.d), _scale(p)),
    grid=lambda p: (ceil_div(p.N, 16), ceil_div(p.N, 16)),
    block=lambda p: (16, 16),
    cases=[
        case("tiny", N=3, d=2, seed=1),
        case("one_tile", N=16, d=8, seed=2),
        case("single_query", N=1, d=64, seed=3),
        case("tile_minus_one", N=127, d=64, seed=4),
        case("tile_plus_one", N=129, d=32, seed=5),
        case("other_scale", N=20, d=12, scale=0.7, seed=6),
        hidden("odd_head_dim", N=70, d=24),
        hidden("ragged", N=33, d=64),
        hidden("custom_scale_ragged", N=45, d=70, scale=0.05),
    ],
    magnitude=_score_size,
    mistakes=[
        SCALE_FROM_D,
        Mistake("scale never applied", "S = scale * Q K^T; multiply the dot product by scale.",
                lambda p, x: dict(S=ref.scaled_scores(x["Q"], x["K"], 1.0))),
        Mistake("scale applied twice", "multiply by scale once"
                " (at the default scale 1/sqrt(d) the same numbers come from dividing by d instead of sqrt(d)).",
                lambda p, x: dict(S=ref.scaled_scores(x["Q"], x["K"], float(_scale(p)) ** 2))),
        Mistake("K indexed as if stored transposed", "K is row-major [N, d] like Q: feature k of key j is "
                "K[j*d + k], so S[i, j] = scale * sum_k Q[i*d + k] * K[j*d + k] (both read along a row).",
                lambda p, x: dict(S=float(_scale(p)) * ref.matmul(x["Q"], x["K"].reshape(p.d, p.N)))),
    ],
)


def _softmax_f32(s, m):
    """exp(s - m) / sum(exp(s - m)) row by row in float32, for a given per-row m (may overflow)."""
    with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
        e = np.exp(np.asarray(s, np.float32) - np.asarray(m, np.float32))
        return (e / e.sum(axis=-1, keepdims=True)).astype(np.float64)


def _unsafe_softmax(s):
    """What a kernel computes without subtracting the row max, in float32 (overflows)."""
    return _softmax_f32(s, np.float32(0))


def _max_from_zero_softmax(s):
    """The row max started at 0 instead of -inf: m = max(0, max_j s_j). A row of very negative
    logits then underflows to exp(s - 0) = 0 everywhere, and 0/0 = NaN."""
    return _softmax_f32(s, np.maximum(np.asarray(s, np.float32).max(axis=-1, keepdims=True), np.float32(0)))


def _logits(p, rng):
    """Standard normal logits times ``logit_scale``; with ``shift``, even rows are moved up by
    ``shift`` and odd rows down by it (rows far above and far below zero)."""
    s = rng.standard_normal((p.N, p.N)) * getattr(p, "logit_scale", 1.0)
    shift = getattr(p, "shift", 0.0)
    if shift:
        s += shift * np.where(np.arange(p.N) % 2 == 0, 1.0, -1.0)[:, None]
    return dict(S=s.astype(F32))


exercise(
    id="softmax_rows",
    hidden_sizes={"N": 128},
    module=MODULE,
    kernel="softmax_rows",
    signature="softmax_rows(const float* S, float* P, int N)",
    launch_shape="block = 128 threads, grid = ceil_div(N, 128); thread i owns row i of the N x N matrix",
    make_inputs=_logits,
    outputs=dict(P=lambda p: ((p.N, p.N), F32)),
    reference=lambda p, x: dict(P=ref.softmax_rows(x["S"])),
    args=lambda p, a: (a.S, a.P, np.int32(p.N)),
    grid=lambda p: ceil_div(p.N, 128),
    block=lambda p: 128,
    cases=[
        case("tiny", N=3, seed=1),
        case("single", N=1, seed=2),
        case("block_plus_one", N=129, seed=3),
        case("large_logits", N=40, logit_scale=1000.0, seed=4),
        case("far_from_zero", N=50, logit_scale=10.0, shift=200.0, seed=5),
        hidden("large_logits_ragged", N=77, logit_scale=1000.0),
        hidden("far_from_zero_ragged", N=91, logit_scale=10.0, shift=200.0),
        hidden("medium", N=200),
    ],
    mistakes=[
        Mistake("unsafe softmax", "exp(x) overflows float32 once x > 88.7. Subtract the row max before exp: "
                "softmax(x) = exp(x - m) / sum(exp(x - m)) with m = max(x).",
                lambda p, x: dict(P=_unsafe_softmax(x["S"]))),
        Mistake("row max starts at 0", "start the max at -INFINITY, not 0: in a row whose logits are all far "
                "below zero, exp(x - 0) underflows to 0 for every entry and the row becomes 0/0 = NaN.",
                lambda p, x: dict(P=_max_from_zero_softmax(x["S"]))),
        Mistake("normalised over columns", "each row of P must sum to 1; the sum runs along the row (over j).",
                lambda p, x: dict(P=ref.softmax_rows(x["S"].T).T)),
        Mistake("not normalised", "P = exp(x - m) / l with l = sum_j exp(x_j - m): divide by the row's sum "
                "so that every row of P sums to 1.",
                lambda p, x: dict(P=np.exp(x["S"].astype(np.float64) - x["S"].max(axis=-1, keepdims=True)))),
    ],
)


exercise(
    id="attn_pv",
    hidden_sizes={"N": 16, "d": 8},
    module=MODULE,
    kernel="attn_pv",
    signature="attn_pv(const float* P, const float* V, float* O, int N, int d)",
    launch_shape="block = (16, 16), grid = (ceil_div(d, 16), ceil_div(N, 16)); thread (x, y) computes "
    "O[i*d + c] with i = row (y), c = feature column (x)",
    make_inputs=lambda p, rng: dict(P=ref.softmax_rows(rng.standard_normal((p.N, p.N))).astype(F32),
                                    V=rng.standard_normal((p.N, p.d)).astype(F32)),
    outputs=dict(O=lambda p: ((p.N, p.d), F32)),
    reference=lambda p, x: dict(O=ref.matmul(x["P"], x["V"])),
    magnitude=lambda p, x: dict(O=ref.matmul(np.abs(x["P"]), np.abs(x["V"]))),
    args=lambda p, a: (a.P, a.V, a.O, np.int32(p.N), np.int32(p.d)),
    grid=lambda p: (ceil_div(p.d, 16), ceil_div(p.N, 16)),
    block=lambda p: (16, 16),
    cases=[
        case("tiny", N=3, d=2, seed=1),
        case("single_row", N=1, d=16, seed=2),
        case("tile_plus_one", N=129, d=64, seed=3),
        case("odd_head_dim", N=40, d=24, seed=4),
        hidden("ragged", N=100, d=48),
    ],
    mistakes=[
        Mistake("P transposed", "O[i, c] = sum_j P[i, j] V[j, c]; read P along row i.",
                lambda p, x: dict(O=ref.matmul(x["P"].T, x["V"]))),
        Mistake("inner loop stops at d", "the sum O[i, c] = sum_j P[i, j] V[j, c] runs over all N keys j, "
                "not over the d features.",
                lambda p, x: dict(O=ref.matmul(x["P"][:, : p.d], x["V"][: p.d])) if p.d < p.N else None),
        Mistake("only the last key counted", "accumulate in a register (acc += P[i, j] * V[j, c]) and write O "
                "once after the loop; assigning O inside the loop keeps only the last term.",
                lambda p, x: dict(O=np.outer(x["P"][:, -1], x["V"][-1]).astype(np.float64)) if p.N > 1 else None),
    ],
)


def _batched_scores_ref(p, x):
    return dict(S=ref.scaled_scores(x["Q"], x["K"], float(_scale(p))))


exercise(
    id="attn_scores_batched",
    hidden_sizes={"N": 16, "d": 8},
    module=MODULE,
    kernel="attn_scores_batched",
    signature="attn_scores_batched(const float* Q, const float* K, float* S, int BH, int N, int d, float scale)",
    launch_shape="block = (16, 16), grid = (ceil_div(N, 16), ceil_div(N, 16), BH); blockIdx.z picks the head; "
    "Q, K are [BH, N, d], S is [BH, N, N]",
    make_inputs=lambda p, rng: _qk(p, rng, heads=p.BH),
    outputs=dict(S=lambda p: ((p.BH, p.N, p.N), F32)),
    reference=_batched_scores_ref,
    args=lambda p, a: (a.Q, a.K, a.S, np.int32(p.BH), np.int32(p.N), np.int32(p.d), _scale(p)),
    grid=lambda p: (ceil_div(p.N, 16), ceil_div(p.N, 16), p.BH),
    block=lambda p: (16, 16),
    cases=[
        case("one_head", BH=1, N=16, d=8, seed=1),
        case("four_heads", BH=4, N=17, d=16, seed=2),
        case("many_heads", BH=12, N=33, d=32, seed=3),
        case("fewer_keys_than_dims", BH=3, N=10, d=40, seed=4),
        case("other_scale", BH=2, N=20, d=12, scale=0.7, seed=5),
        hidden("ragged_heads", BH=6, N=45, d=24),
        hidden("custom_scale_many_tiles", BH=3, N=70, d=24, scale=2.0),
    ],
    magnitude=_score_size,
    mistakes=[
        SCALE_FROM_D,
        Mistake("head offset missing", "every head computed head 0's scores: offset Q and K by "
                "blockIdx.z * N * d and S by blockIdx.z * N * N.",
                lambda p, x: dict(S=np.broadcast_to(ref.scaled_scores(x["Q"][0], x["K"][0], float(_scale(p))), (p.BH, p.N, p.N)))
                if p.BH > 1 else None),
        Mistake("head offset missing for K", "Q is offset to head z but K is not: every head scored its queries "
                "against head 0's keys. Offset K by blockIdx.z * N * d too.",
                lambda p, x: dict(S=ref.scaled_scores(x["Q"], x["K"][:1], float(_scale(p)))) if p.BH > 1 else None),
        Mistake("scale never applied", "S = scale * Q K^T; multiply the dot product by scale.",
                lambda p, x: dict(S=ref.scaled_scores(x["Q"], x["K"], 1.0))),
    ],
)

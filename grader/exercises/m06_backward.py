"""06_backward: D, dK/dV, dQ two ways, and the causal dK/dV."""
import numpy as np

from .. import reference as ref
from ..exercise_rows import BACKWARD_NAN, Mistake, case, exercise, hidden
from ..launch import ceil_div
from .shared import backward_magnitude, qkv, scale_of, tile_skipping_io

MODULE = "06_backward"
F32 = np.float32
ROWS_PER_BLOCK = 64  # one thread per key row (dK/dV) or query row (dQ)
TILE = 32  # the tile of the other side staged in shared memory
RACE_CASE = "blocks_and_heads"  # run under the race detector and a second schedule on the emulator



def _inputs(p, rng):
    """Forward inputs plus what the forward saved (O, L) and the incoming gradient dO."""
    x = qkv(p, rng)
    causal = getattr(p, "causal", False)
    o, lse = ref.attention_forward(x["Q"], x["K"], x["V"], causal=causal, scale=float(scale_of(p)))
    do = rng.standard_normal(o.shape)
    x |= dict(dO=do.astype(F32), O=o.astype(F32), L=lse.astype(F32))
    x["D"] = ref.backward_preprocess(x["O"], x["dO"]).astype(F32)
    return x


def _grads(p, x, scale=None, lse=None, D=None, scale_out=None):
    """Reference gradients from the kernel's own float32 inputs; overrides reproduce bugs
    (``scale`` in the recomputed P, ``scale_out`` in dQ = scale * dS K and dK)."""
    causal = getattr(p, "causal", False)
    s = float(scale_of(p)) if scale is None else scale
    inter = ref.backward_intermediates(x["Q"], x["K"], x["V"], x["O"], x["L"] if lse is None else lse, x["dO"], causal=causal, scale=s)
    P, dS = inter["P"], inter["dS"]
    if D is not None:
        dS = P * (inter["dP"] - D[..., None])
    q, k = np.asarray(x["Q"], np.float64), np.asarray(x["K"], np.float64)
    scale_true = float(scale_of(p)) if scale_out is None else scale_out
    return dict(dQ=scale_true * dS @ k, dK=scale_true * np.swapaxes(dS, -1, -2) @ q,
                dV=np.swapaxes(P, -1, -2) @ np.asarray(x["dO"], np.float64))


def _pick(d, *names):
    return {n: d[n] for n in names}


def _dkdv_with_mask(p, x, keep):
    """dK, dV when P is kept only where ``keep(i, j)`` (query i, key j) is True: reproduces
    wrong causal masks. L and D are the correct (causal) ones the kernel reads."""
    q, k, v, do = (np.asarray(x[n], np.float64) for n in ("Q", "K", "V", "dO"))
    s = float(scale_of(p))
    i, j = np.arange(p.N)[:, None], np.arange(p.N)[None, :]
    with np.errstate(over="ignore"):
        P = np.where(keep(i, j), np.exp(s * q @ np.swapaxes(k, -1, -2) - np.asarray(x["L"], np.float64)[..., None]), 0.0)
    dS = P * (do @ np.swapaxes(v, -1, -2) - np.asarray(x["D"], np.float64)[..., None])
    return dict(dK=s * np.swapaxes(dS, -1, -2) @ q, dV=np.swapaxes(P, -1, -2) @ do)


CAUSAL_MISTAKES = [
    Mistake("causal mask missing", "query i sees only keys j <= i: skip the query tiles that lie entirely above "
            "the diagonal and set P_ij = 0 (so dS_ij = 0) for i < j inside the others.",
            lambda p, x: _dkdv_with_mask(p, x, lambda i, j: np.ones_like(i + j, bool))),
    Mistake("mask missing inside the diagonal tiles", "skipping the tiles above the diagonal is not enough: a tile "
            "that straddles it still holds query rows i < j for some of the block's keys; give them P_ij = 0.",
            lambda p, x: _dkdv_with_mask(p, x, lambda i, j: i >= (j // ROWS_PER_BLOCK) * ROWS_PER_BLOCK)
            if p.N > ROWS_PER_BLOCK else None),
    Mistake("diagonal masked out", "query i sees key j = i too: mask only i < j (keep j <= i).",
            lambda p, x: _dkdv_with_mask(p, x, lambda i, j: i > j)),
]


GRAD_CASES = [
    case("single_row", B=1, H=1, N=1, d=32, seed=1),
    case("one_tile", B=1, H=1, N=32, d=32, seed=2),
    case("tile_plus_one", B=1, H=2, N=33, d=32, seed=3),
    case("two_row_blocks", B=1, H=1, N=65, d=64, seed=4),
    case("batches_and_heads", B=2, H=2, N=40, d=32, spread=3.0, seed=5),
    case("other_scale", B=1, H=2, N=45, d=40, scale=0.5, seed=6),
    # the race-checked case (RACE_CASE): several blocks per head and several heads
    case("blocks_and_heads", B=1, H=2, N=100, d=32, seed=8),
    case("scores_below_minus_87", B=1, H=1, N=70, d=32, negative=150.0, seed=7),
    hidden("ragged", B=1, H=2, N=77, d=48),
    hidden("head_dim_128", B=1, H=1, N=40, d=128),
    hidden("custom_scale_large_logits", B=1, H=2, N=70, d=24, scale=0.3, spread=8.0),
    hidden("falling_max", B=1, H=1, N=100, d=32, falling=100.0),
]


def _magnitude(outputs):
    def size(p, x):
        return _pick(backward_magnitude(x, float(scale_of(p)), causal=getattr(p, "causal", False)), *outputs)

    return size


def _grad_mistakes(outputs):
    def sub(fn):
        return lambda p, x: _pick(fn(p, x), *outputs)

    found = [
        Mistake("P recomputed without L", "recompute P = exp(scale*q.k - L) with the row's saved logsumexp L; "
                "exp(scale*q.k) alone is not normalised.",
                sub(lambda p, x: _grads(p, x, lse=np.zeros_like(x["L"])))),
        Mistake("dS without the D term", "dS = P * (dP - D) with D = rowsum(dO * O); the D term comes from the "
                "softmax's normalisation.", sub(lambda p, x: _grads(p, x, D=np.zeros_like(x["D"])))),
    ]
    found.append(Mistake("scale computed from d instead of the scale argument",
                         "use the kernel's `scale` argument (in P = exp(scale*q.k - L) and in dQ, dK): the caller "
                         "may pass any scale, not only 1/sqrt(d).",
                         lambda p, x: _pick(_grads(p, x, scale=1 / np.sqrt(p.d), scale_out=1 / np.sqrt(p.d)), *outputs)
                         if not np.isclose(float(scale_of(p)), 1 / np.sqrt(p.d)) else None))
    if "dQ" in outputs or "dK" in outputs:
        name = "dQ" if "dQ" in outputs else "dK"

        def no_scale(p, x):
            g = _grads(p, x)
            g[name] = g[name] / float(scale_of(p))
            return _pick(g, *outputs)

        found.append(Mistake(f"scale missing in {name}", f"{name} = scale * (...): the chain rule brings the "
                             "softmax scale of S = scale*QK^T into dQ and dK (not into dV).", no_scale))
    return found


exercise(
    id="flash_bwd_preprocess",
    hidden_sizes={"N": 64, "d": 8},
    module=MODULE,
    nan_causes=BACKWARD_NAN,
    kernel="flash_bwd_preprocess",
    signature="flash_bwd_preprocess(const float* O, const float* dO, float* D, int rows, int d)",
    launch_shape="grid = ceil_div(rows, 128), block = 128: thread r computes D[r] = sum_c dO[r, c] * O[r, c] "
    "(rows = B*H*N, arrays flattened to [rows, d])",
    make_inputs=_inputs,
    outputs=dict(D=lambda p: ((p.B, p.H, p.N), F32)),
    reference=lambda p, x: dict(D=ref.backward_preprocess(x["O"], x["dO"])),
    magnitude=lambda p, x: dict(D=(np.abs(np.asarray(x["O"], np.float64)) * np.abs(x["dO"])).sum(-1)),
    args=lambda p, a: (a.O, a.dO, a.D, np.int32(p.B * p.H * p.N), np.int32(p.d)),
    grid=lambda p: ceil_div(p.B * p.H * p.N, 128),
    block=lambda p: 128,
    cases=GRAD_CASES,
    mistakes=[
        Mistake("summed dO alone", "D is the row sum of the elementwise product dO * O.",
                lambda p, x: dict(D=np.asarray(x["dO"], np.float64).sum(-1))),
    ],
)

_TILE_ARGS = lambda p, a: (a.Q, a.K, a.V, a.dO, a.L, a.D)  # noqa: E731

exercise(
    id="flash_bwd_dkdv",
    hidden_sizes={"N": 64, "d": 8},
    module=MODULE,
    nan_causes=BACKWARD_NAN,
    kernel="flash_bwd_dkdv",
    signature="flash_bwd_dkdv(const float* Q, const float* K, const float* V, const float* dO, const float* L, "
    "const float* D, float* dK, float* dV, int N, int d, float scale)",
    launch_shape=f"grid = (ceil_div(N, {ROWS_PER_BLOCK}), H, B), block = {ROWS_PER_BLOCK}: thread t owns key row "
    f"j = blockIdx.x*{ROWS_PER_BLOCK} + t and loops over query tiles of {TILE} rows (Q, dO, L, D staged in shared "
    "memory), recomputing P = exp(scale*q.k - L); dK and dV are written once at the end",
    make_inputs=_inputs,
    outputs=dict(dK=lambda p: ((p.B, p.H, p.N, p.d), F32), dV=lambda p: ((p.B, p.H, p.N, p.d), F32)),
    reference=lambda p, x: _pick(_grads(p, x), "dK", "dV"),
    magnitude=_magnitude(("dK", "dV")),
    args=lambda p, a: (*_TILE_ARGS(p, a), a.dK, a.dV, np.int32(p.N), np.int32(p.d), scale_of(p)),
    grid=lambda p: (ceil_div(p.N, ROWS_PER_BLOCK), p.H, p.B),
    block=lambda p: ROWS_PER_BLOCK,
    race_check=True,
    race_case=RACE_CASE,
    cases=GRAD_CASES,
    mistakes=_grad_mistakes(("dK", "dV")),
)

exercise(
    id="flash_bwd_dq",
    hidden_sizes={"N": 64, "d": 8},
    module=MODULE,
    nan_causes=BACKWARD_NAN,
    kernel="flash_bwd_dq",
    signature="flash_bwd_dq(const float* Q, const float* K, const float* V, const float* dO, const float* L, "
    "const float* D, float* dQ, int N, int d, float scale)",
    launch_shape=f"grid = (ceil_div(N, {ROWS_PER_BLOCK}), H, B), block = {ROWS_PER_BLOCK}: thread t owns query row "
    f"i = blockIdx.x*{ROWS_PER_BLOCK} + t and loops over key tiles of {TILE} (K and V staged in shared memory), "
    "recomputing P; dQ written once at the end, no atomics",
    make_inputs=_inputs,
    outputs=dict(dQ=lambda p: ((p.B, p.H, p.N, p.d), F32)),
    reference=lambda p, x: _pick(_grads(p, x), "dQ"),
    magnitude=_magnitude(("dQ",)),
    args=lambda p, a: (*_TILE_ARGS(p, a), a.dQ, np.int32(p.N), np.int32(p.d), scale_of(p)),
    grid=lambda p: (ceil_div(p.N, ROWS_PER_BLOCK), p.H, p.B),
    block=lambda p: ROWS_PER_BLOCK,
    race_check=True,
    race_case=RACE_CASE,
    cases=GRAD_CASES,
    mistakes=_grad_mistakes(("dQ",)),
)

exercise(
    id="flash_bwd_atomic",
    hidden_sizes={"N": 64, "d": 8},
    module=MODULE,
    nan_causes=BACKWARD_NAN,
    kernel="flash_bwd_atomic",
    signature="flash_bwd_atomic(const float* Q, const float* K, const float* V, const float* dO, const float* L, "
    "const float* D, float* dK, float* dV, float* dQ, int N, int d, float scale)",
    launch_shape="as flash_bwd_dkdv, and each thread also adds its key row's contribution scale*dS[i][j]*K[j] "
    "into dQ[i] with atomicAdd (dQ arrives zero-filled)",
    make_inputs=_inputs,
    outputs=dict(dK=lambda p: ((p.B, p.H, p.N, p.d), F32), dV=lambda p: ((p.B, p.H, p.N, p.d), F32),
                 dQ=lambda p: ((p.B, p.H, p.N, p.d), F32)),
    zeroed=("dQ",),
    reference=lambda p, x: _grads(p, x),
    magnitude=_magnitude(("dK", "dV", "dQ")),
    args=lambda p, a: (*_TILE_ARGS(p, a), a.dK, a.dV, a.dQ, np.int32(p.N), np.int32(p.d), scale_of(p)),
    grid=lambda p: (ceil_div(p.N, ROWS_PER_BLOCK), p.H, p.B),
    block=lambda p: ROWS_PER_BLOCK,
    race_check=True,
    race_case=RACE_CASE,
    cases=GRAD_CASES,
    mistakes=_grad_mistakes(("dK", "dV", "dQ")),
)

exercise(
    id="flash_bwd_dkdv_causal",
    hidden_sizes={"N": 64, "d": 8},
    module=MODULE,
    nan_causes=BACKWARD_NAN,
    kernel="flash_bwd_dkdv_causal",
    signature="flash_bwd_dkdv_causal(const float* Q, const float* K, const float* V, const float* dO, const float* L, "
    "const float* D, float* dK, float* dV, int N, int d, float scale)",
    launch_shape="as flash_bwd_dkdv for causal attention (query i sees keys j <= i): skip every query tile that lies "
    "entirely above the diagonal for this block's keys (all its rows i < the block's first key), mask inside the rest",
    make_inputs=_inputs,
    outputs=dict(dK=lambda p: ((p.B, p.H, p.N, p.d), F32), dV=lambda p: ((p.B, p.H, p.N, p.d), F32)),
    reference=lambda p, x: _pick(_grads(p, x), "dK", "dV"),
    magnitude=_magnitude(("dK", "dV")),
    args=lambda p, a: (*_TILE_ARGS(p, a), a.dK, a.dV, np.int32(p.N), np.int32(p.d), scale_of(p)),
    grid=lambda p: (ceil_div(p.N, ROWS_PER_BLOCK), p.H, p.B),
    block=lambda p: ROWS_PER_BLOCK,
    race_check=True,
    race_case=RACE_CASE,
    cases=[case(c.name, seed=c.seed, causal=True, **c.params) if not c.hidden else
           hidden(c.name, causal=True, **c.params) for c in GRAD_CASES],
    mistakes=_grad_mistakes(("dK", "dV")) + CAUSAL_MISTAKES,
    io_check=tile_skipping_io(ROWS_PER_BLOCK, TILE, 4, backward=True),
    io_case=RACE_CASE,
)

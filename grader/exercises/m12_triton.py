"""12_triton: FlashAttention in Triton, graded like the CUDA kernels.

Each answer is a ``%%triton NAME`` cell: ``@triton.jit`` kernels plus a launcher ``NAME`` that the
check calls with torch tensors (CPU tensors in Triton's interpreter, CUDA tensors on a GPU). The
outputs come preallocated and poisoned; inputs may be non-contiguous views (a launcher must pass
strides); the references are the same float64 ones as modules 04-09.

Shapes: ``softmax(x, y)``: x, y [rows, cols] float32. ``flash_forward(q, k, v, o, lse, scale)``
and ``flash_forward_causal(...)``: q, k, v, o [B, H, N, d] float16 or bfloat16, lse [B, H, N]
float32 (natural-log logsumexp), d in {64, 128}. ``flash_backward(q, k, v, o, lse, do, dq, dk, dv,
scale)`` (the bonus): q, k, v, o, do [B, H, N, d] float16 or bfloat16, lse as the forward's, dq, dk,
dv [B, H, N, d] float32, judged at the unit roundoff of the inputs' dtype (the products behind them
take P and dS in half precision); its launcher may allocate scratch (D = rowsum(dO * O)).
"""
import numpy as np

from .. import reference as ref
from ..arrays import BF16, bf16_bits, bf16_values
from ..exercise_rows import BACKWARD_NAN, Mistake, case, hidden, triton_exercise
from .shared import backward_magnitude, forward_magnitude, forward_mistakes, forward_with_mask, qkv

MODULE = "12_triton"
F16, F32 = np.float16, np.float32
BLOCK = 64  # the key block the named tile mistakes assume (the solution's and the hints' choice)
BNHD = (0, 2, 1, 3)  # Q, K, V stored [B, N, H, d], as most models keep them, handed over as [B, H, N, d]


def _values(x):
    """Inputs as the values they hold (bfloat16 bits read as float32)."""
    return {k: (bf16_values(v) if v.dtype == np.uint16 else np.asarray(v)).astype(np.float64) for k, v in x.items()}


# --------------------------------------------------------------------------- 1. row softmax


def _softmax_inputs(p, rng):
    x = rng.standard_normal((p.rows, p.cols)) * getattr(p, "spread", 1.0) + getattr(p, "shift", 0.0)
    return dict(x=x.astype(F32))


def _softmax_ref(p, x):
    return dict(y=ref.softmax_rows(x["x"]))


def _padded_block(cols):
    return 1 << max(0, (cols - 1).bit_length())


def _tail_zero(p, x):
    """Masked lanes loaded as 0 instead of -inf: each row's sum gains (BLOCK - cols) * exp(0 - m)
    (BLOCK = next power of two of cols), and 0 joins the max."""
    pad = _padded_block(p.cols) - p.cols
    if pad == 0:
        return None
    s = np.concatenate([np.asarray(x["x"], np.float64), np.zeros((p.rows, pad))], axis=1)
    return dict(y=ref.softmax_rows(s)[:, :p.cols])


def _no_max(p, x):
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(np.asarray(x["x"], F32))
        return dict(y=(e / e.sum(axis=1, keepdims=True)).astype(np.float64))


SOFTMAX_CASES = [
    case("one_element", seed=1, rows=1, cols=1),
    case("ragged", seed=2, rows=37, cols=100),
    case("wide", seed=3, rows=8, cols=1500),
    case("large_logits", seed=4, rows=16, cols=300, spread=40.0),
    case("all_below_minus_87", seed=5, rows=16, cols=65, shift=-200.0),
    case("column_major_input", seed=6, rows=20, cols=50, layout="T"),
    hidden("ragged", rows=53, cols=333),
    hidden("power_of_two", rows=64, cols=512),
    hidden("large_logits", rows=9, cols=777, spread=60.0),
    hidden("column_major_input", rows=31, cols=129, layout="T"),
]

triton_exercise(
    id="triton_softmax",
    hidden_sizes={"rows": 16, "cols": 16},
    module=MODULE,
    kernel="softmax",
    signature="softmax(x, y): x, y torch tensors [rows, cols] float32; fills y with the softmax of each row of x",
    launch_shape="one program per row (or per block of rows); a block of BLOCK = triton.next_power_of_2(cols) "
                 "columns, the tail masked; x may be a strided view (pass x.stride(0) and x.stride(1))",
    make_inputs=_softmax_inputs,
    outputs=dict(y=lambda p: ((p.rows, p.cols), F32)),
    reference=_softmax_ref,
    args=lambda p, t: (t.x, t.y),
    views=lambda p: {"x": (1, 0)} if getattr(p, "layout", "") == "T" else {},
    cases=SOFTMAX_CASES,
    mistakes=[
        Mistake("masked columns loaded as 0", "load the tail with other=-float('inf'): a 0 joins the max and adds "
                "exp(0 - m) to the sum for every padding lane.", _tail_zero),
        Mistake("max not subtracted", "exp(x) overflows float32 above x = 88.7 (and underflows below -103): subtract "
                "the row max first, exp(x - max(x)), which changes nothing mathematically.", _no_max),
    ],
)


# --------------------------------------------------------------------------- 2./3. the FA2 forward


def _scale(p):
    return float(F32(getattr(p, "scale", 1.0 / np.sqrt(p.d))))


def _flash_inputs(p, rng):
    x = qkv(p, rng)  # float32; negative / falling / late_peak / spread as in modules 04-09
    if getattr(p, "dtype", "fp16") == "bf16":
        return {k: bf16_bits(v) for k, v in x.items()}
    return {k: v.astype(F16) for k, v in x.items()}


def _flash_ref(p, x):
    o, lse = ref.attention_forward(*(_values(x)[n] for n in "QKV"), causal=getattr(p, "causal", False), scale=_scale(p))
    return dict(O=o, L=lse)


def _flash_magnitude(p, x):
    return forward_magnitude(_values(x), _scale(p), causal=getattr(p, "causal", False))


def _on_values(m):
    return Mistake(m.name, m.explain, lambda p, x, wrong=m.wrong: wrong(p, _values(x)))


def _keep(rule):
    def mistake(p, x):
        i, j = np.arange(p.N)[:, None], np.arange(p.N)[None, :]
        o, lse = forward_with_mask(_values(x), _scale(p), rule(i, j)[None, None])
        return dict(O=o, L=lse)
    return mistake


def _exp2_unfolded(p, x):
    """p = exp2(s - m) on natural-log scores: the softmax of s * ln 2, and L = (m + log2 l) / log2(e)
    = ln sum_j 2^(s_j), the logsumexp of the same scores."""
    v = _values(x)
    o, lse = ref.attention_forward(v["Q"], v["K"], v["V"], causal=getattr(p, "causal", False),
                                   scale=_scale(p) * np.log(2.0))
    return dict(O=o, L=lse)


def _acc_in_half(p, x, block=64):
    """The output accumulator rounded to the inputs' half type after each block of keys (an acc of
    q.dtype, or tl.dot(p, v, acc) cast back): the rows whose unnormalised sum passes 65504 become inf.
    Only for the flat-score cases (spread=0, v_offset), where the running max never moves."""
    if getattr(p, "spread", 1.0) != 0.0 or not getattr(p, "v_offset", 0.0) or getattr(p, "dtype", "fp16") != "fp16":
        return None
    v = _values(x)
    o, lse = ref.attention_forward(v["Q"], v["K"], v["V"], causal=getattr(p, "causal", False), scale=_scale(p))
    keep = np.tril(np.ones((p.N, p.N), bool)) if getattr(p, "causal", False) else np.ones((p.N, p.N), bool)
    acc = np.zeros(v["V"].shape[:-2] + (p.N, p.d), F16)
    with np.errstate(over="ignore"):
        for j in range(0, p.N, block):  # every score 0: p = 1 for each kept key
            acc = (acc.astype(np.float64) + keep[:, j:j + block].astype(np.float64) @ v["V"][..., j:j + block, :]).astype(F16)
    return dict(O=acc.astype(np.float64) / keep.sum(1)[:, None], L=lse)


TRITON_MISTAKES = [
    Mistake("accumulated in half precision", "keep acc in float32 (tl.zeros(..., tl.float32), and tl.dot(p, v, acc) "
            "with that acc): with every score equal the unnormalised output is the sum of the values, past half "
            "precision's 65504 here; only O, divided by l at the end, goes back to the inputs' type.", _acc_in_half),
    Mistake("exp2 without log2(e) folded into the scale",
            "tl.exp2(s - m) is e^((s - m) ln 2): multiply the scores by scale * log2(e) = scale * 1.44269504 before "
            "the max and exp2 (and turn L back into natural log at the end: L = (m + log2(l)) / log2(e)).",
            _exp2_unfolded),
]


def _causal_mistakes():
    return [
        Mistake("no causal mask", "query i sees keys 0..i only: visit the key blocks up to the diagonal, and in the "
                "diagonal block set the scores of keys past the row to -inf (tl.where(rows >= cols, s, -inf)).",
                _keep(lambda i, j: np.ones((i.size, j.size), bool))),
        Mistake("mask off by one on the diagonal", "query i may attend to key i itself: keep cols <= rows, not "
                "cols < rows (with <, query 0 sees nothing at all).", _keep(lambda i, j: j < i)),
        Mistake("diagonal block not masked", f"the key blocks strictly below the diagonal need no mask, but the "
                f"diagonal block does (blocks of {BLOCK} assumed here): mask it in the second stage.",
                _keep(lambda i, j: j // BLOCK <= i // BLOCK)),
        Mistake("diagonal block skipped", f"the first stage covers key blocks below the query block ({BLOCK} here), "
                "the second the diagonal block itself, masked: without it, query row 0 sees no key at all.",
                _keep(lambda i, j: (j <= i) & (j // BLOCK < i // BLOCK))),
    ]


def _forward_mistakes(causal):
    keep = (lambda p, x: (np.arange(p.N)[None, :] <= np.arange(p.N)[:, None])[None, None]) if causal else None
    shared = forward_mistakes(Mistake, BLOCK, keep=keep)
    return [_on_values(m) for m in (_causal_mistakes() if causal else []) + shared] + TRITON_MISTAKES


def causal_dot_work(limit=0.75):
    """Grade tile skipping on the interpreter's count of tl.dot multiply-adds: attending every query to
    every key costs 2 B H N^2 d; a kernel that never visits a key block above the diagonal does at most
    (n + 1) / (2 n) of that with n query blocks (0.53 at N = 1024 with blocks of 64, 0.56 with 128)."""
    def check(macs, p):
        dense = 2 * p.B * p.H * p.N * p.N * p.d
        share = macs / dense
        if share <= limit:
            return None
        return (f"tl.dot did {macs:,} multiply-adds, {share:.0%} of attending every query to every key "
                f"({dense:,}). A causal kernel never visits the key blocks above the diagonal: its query block m "
                f"loops over key blocks 0 .. m only (the last one masked), which here is at most {limit:.0%}. "
                "Stop the loop at the diagonal instead of masking every block.")
    return check


def _flash_cases(causal):
    c = dict(causal=True) if causal else {}
    rows = [
        case("one_row", seed=11, B=1, H=1, N=1, d=64, **c),
        case("ragged_tail", seed=12, B=1, H=2, N=77, d=64, scale=0.3, **c),
        case("d128", seed=13, B=1, H=1, N=130, d=128, **c),
        case("bf16", seed=14, B=1, H=1, N=200, d=64, dtype="bf16", **c),
        case("bnhd_layout", seed=15, B=2, H=2, N=100, d=64, layout="bnhd", **c),
        case("max_in_last_block", seed=16, B=1, H=1, N=600, d=64, late_peak=30.0, **c),
        case("later_blocks_far_below", seed=17, B=1, H=1, N=300, d=64, falling=120.0, **c),
        case("all_scores_below_minus_87", seed=18, B=1, H=1, N=200, d=64, negative=150.0, **c),
        case("uniform_large_values", seed=20, B=1, H=1, N=256, d=64, spread=0.0, v_offset=300.0, **c),
        hidden("ragged", B=2, H=3, N=333, d=64, layout="bnhd", **c),
        hidden("bf16_d128", B=1, H=2, N=257, d=128, dtype="bf16", **c),
        hidden("one_row_bf16", B=1, H=1, N=1, d=128, dtype="bf16", **c),
        hidden("small_scale", B=1, H=2, N=190, d=64, scale=0.05, **c),
        hidden("large_logits", B=1, H=1, N=513, d=64, spread=6.0, **c),
    ]
    if causal:
        rows.insert(6, case("many_blocks", seed=19, B=1, H=1, N=1024, d=64, causal=True))
    return rows


def _flash_exercise(causal):
    name = "flash_forward_causal" if causal else "flash_forward"
    out_dtype = lambda p: BF16 if getattr(p, "dtype", "fp16") == "bf16" else F16  # noqa: E731
    triton_exercise(
        id="triton_" + name,
        hidden_sizes={"N": 64},
        module=MODULE,
        kernel=name,
        signature=f"{name}(q, k, v, o, lse, scale): q, k, v, o torch tensors [B, H, N, d] (float16 or bfloat16, "
                  "any strides), lse [B, H, N] float32, scale a float; fills o and lse (natural-log logsumexp)",
        launch_shape="grid = (triton.cdiv(N, BLOCK_M), B * H): one program per block of BLOCK_M query rows of one "
                     "head, looping over key blocks of BLOCK_N; d a tl.constexpr (64 or 128); every tensor's strides "
                     "passed (q, k and v may be [B, N, H, d] storage seen as [B, H, N, d])"
                     + ("; causal: query i sees keys 0..i, and key blocks above the diagonal are never visited"
                        if causal else ""),
        make_inputs=_flash_inputs,
        outputs=dict(O=lambda p: ((p.B, p.H, p.N, p.d), out_dtype(p)), L=lambda p: ((p.B, p.H, p.N), F32)),
        reference=_flash_ref,
        args=lambda p, t: (t.Q, t.K, t.V, t.O, t.L, _scale(p)),
        views=lambda p: {k: BNHD for k in "QKV"} if getattr(p, "layout", "") == "bnhd" else {},
        cases=_flash_cases(causal),
        mistakes=_forward_mistakes(causal),
        magnitude=_flash_magnitude,
        work_check=causal_dot_work() if causal else None,
        work_case="many_blocks" if causal else None,
    )


_flash_exercise(causal=False)
_flash_exercise(causal=True)


# --------------------------------------------------------------------------- 4. the FA2 backward (bonus)

BWD_VIEWS = ("Q", "K", "V", "O", "dO")  # the tensors a [B, N, H, d] case hands over as views


def _backward_inputs(p, rng):
    """Q, K, V and dO drawn and rounded to the case's dtype; O and L from the float64 forward on the
    rounded values (O rounded to the dtype as a forward would store it, L float32), as module 06."""
    x = _flash_inputs(p, rng)
    do = (rng.standard_normal((p.B, p.H, p.N, p.d)) + getattr(p, "do_offset", 0.0)).astype(F32)
    x["dO"] = bf16_bits(do) if getattr(p, "dtype", "fp16") == "bf16" else do.astype(F16)
    o, lse = ref.attention_forward(*(_values(x)[n] for n in "QKV"), scale=_scale(p))
    x["O"] = bf16_bits(o.astype(F32)) if getattr(p, "dtype", "fp16") == "bf16" else o.astype(F16)
    x["L"] = lse.astype(F32)
    return x


def _backward_values(x):
    v = _values(x)
    v["D"] = ref.backward_preprocess(v["O"], v["dO"])
    return v


def _backward_ref(p, x):
    v = _values(x)
    dq, dk, dv = ref.attention_backward(v["Q"], v["K"], v["V"], v["O"], v["L"], v["dO"], scale=_scale(p))
    return dict(dQ=dq, dK=dk, dV=dv)


def _backward_magnitude(p, x):
    size = backward_magnitude(_backward_values(x), _scale(p))
    return {n: size[n] for n in ("dQ", "dK", "dV")}


def _grads(p, v, *, lse=None, D=None, scale=None, out=None):
    """dQ, dK, dV the FA2 way in float64, with overrides that reproduce mistakes: ``lse`` and ``D``
    the values the kernel used, ``scale`` the one in P = exp(scale q.k - L), ``out`` the factors
    (dQ, dK) that multiply dS K and dS^T Q."""
    s = _scale(p) if scale is None else scale
    q, k, vv, do = v["Q"], v["K"], v["V"], v["dO"]
    L = v["L"] if lse is None else lse
    D = v["D"] if D is None else D
    with np.errstate(over="ignore", invalid="ignore"):
        P = np.exp(s * q @ np.swapaxes(k, -1, -2) - L[..., None])
        dS = P * (do @ np.swapaxes(vv, -1, -2) - D[..., None])
        fq, fk = (s, s) if out is None else out
        return dict(dQ=fq * dS @ k, dK=fk * np.swapaxes(dS, -1, -2) @ q, dV=np.swapaxes(P, -1, -2) @ do)


def _half_products_d(v):
    """rowsum(dO * O) with each product rounded to half (inf past 65504), summed in float."""
    with np.errstate(over="ignore"):
        return (v["O"].astype(F16) * v["dO"].astype(F16)).astype(np.float64).sum(-1)


def _on_backward_values(fn):
    return lambda p, x: fn(p, _backward_values(x))


def _backward_mistakes():
    sc = _scale
    return [Mistake(name, explain, _on_backward_values(fn)) for name, explain, fn in [
        ("D computed from dO and V instead of dO and O",
         "D_i = rowsum(dO_i * O_i), the row of the forward's output O (one number per query row, the "
         "preprocess kernel): not of V.",
         lambda p, v: _grads(p, v, D=(v["dO"] * v["V"]).sum(-1))),
        ("D computed in half precision",
         "D = rowsum(dO * O) with both converted to float32 before the product (o.to(tl.float32) * "
         "do.to(tl.float32)): a product of two half values is rounded to half, and here, outputs and "
         "gradients about 300, it is past half precision's 65504.",
         lambda p, v: _grads(p, v, D=_half_products_d(v)) if getattr(p, "do_offset", 0.0) else None),
        ("dS without the D term (no preprocess)",
         "dS = P * (dP - D) with D = rowsum(dO * O), computed before the main kernels (the preprocess "
         "kernel); it comes from the softmax's normalisation.",
         lambda p, v: _grads(p, v, D=np.zeros_like(v["D"]))),
        ("P from the natural-log L in base 2",
         "the scores are in base 2 (s * scale * log2(e)), L is the forward's natural-log logsumexp: "
         "P = exp2(s * scale * log2(e) - L * log2(e)); exp2(... - L) mixes the two bases.",
         lambda p, v: _grads(p, v, lse=v["L"] * np.log(2.0))),
        ("P recomputed without L", "P = exp(scale * q.k - L) with the row's saved logsumexp L; exp(scale * q.k) "
         "alone is not normalised.", lambda p, v: _grads(p, v, lse=np.zeros_like(v["L"]))),
        ("dS without the scale",
         "S = scale * Q K^T, so the chain rule brings the (natural) scale into both dQ = scale * dS K and "
         "dK = scale * dS^T Q (not into dV).",
         lambda p, v: _grads(p, v, out=(1.0, 1.0))),
        ("dQ missing the scale", "dQ = scale * dS K: the dQ kernel needs the scale as much as dK does.",
         lambda p, v: _grads(p, v, out=(1.0, sc(p)))),
        ("dK missing the scale", "dK = scale * dS^T Q: the dK/dV kernel needs the scale as much as dQ does.",
         lambda p, v: _grads(p, v, out=(sc(p), 1.0))),
        ("dQ and dK scaled by scale * log2(e)",
         "log2(e) belongs to the exponent only (exp2 of base-2 scores); dQ and dK take the natural scale: "
         "pass both scale * log2(e) and scale to the kernels.",
         lambda p, v: _grads(p, v, out=(sc(p) * np.log2(np.e),) * 2)),
        ("dQ scaled by scale * log2(e)",
         "log2(e) belongs to the exponent only (exp2 of base-2 scores); dQ = scale * dS K takes the natural scale.",
         lambda p, v: _grads(p, v, out=(sc(p) * np.log2(np.e), sc(p)))),
        ("dK scaled by scale * log2(e)",
         "log2(e) belongs to the exponent only (exp2 of base-2 scores); dK = scale * dS^T Q takes the natural scale.",
         lambda p, v: _grads(p, v, out=(sc(p), sc(p) * np.log2(np.e)))),
        ("scale computed from d instead of the scale argument",
         "use the launcher's `scale` argument (in P and in dQ, dK): the caller may pass any scale.",
         lambda p, v: _grads(p, v, scale=float(F32(1 / np.sqrt(p.d))), out=(float(F32(1 / np.sqrt(p.d))),) * 2)
         if not np.isclose(sc(p), 1 / np.sqrt(p.d)) else None),
    ]]


# The gradients are float32, but the products behind them take P and dS rounded to the inputs' dtype (as
# tl.dot wants): each term carries one rounding of at most the unit roundoff u (2^-11 for float16, 2^-8
# for bfloat16), so the tolerance is u times the magnitude, which holds the terms' absolute sum (times
# 1 + R_i). The dtype's own tolerance (4e-3, 2e-2) would be 8x / 5x looser and hide the named mistakes.
PRODUCT_TOLERANCE = {"fp16": (2.0 ** -11, 2.0 ** -11), "bf16": (2.0 ** -8, 2.0 ** -8)}

BACKWARD_CASES = [
    case("one_row", seed=21, B=1, H=1, N=1, d=64),
    case("ragged_tail", seed=22, B=1, H=2, N=77, d=64, scale=0.3),
    case("d128", seed=23, B=1, H=1, N=130, d=128),
    case("bf16", seed=24, B=1, H=1, N=150, d=64, dtype="bf16"),
    case("bnhd_layout", seed=25, B=2, H=2, N=70, d=64, layout="bnhd"),
    case("large_logits", seed=26, B=1, H=1, N=140, d=64, spread=6.0),
    case("all_scores_below_minus_87", seed=27, B=1, H=1, N=90, d=64, negative=150.0),
    # every score 0 and V, dO about 300: O about 300 too, so each product dO * O is about 90,000
    case("large_values", seed=28, B=1, H=1, N=256, d=64, spread=0.0, v_offset=300.0, do_offset=300.0),
    hidden("ragged", B=1, H=2, N=201, d=64, layout="bnhd"),
    hidden("bf16_d128", B=1, H=1, N=129, d=128, dtype="bf16", scale=0.1),
    hidden("one_row_bf16", B=1, H=1, N=1, d=128, dtype="bf16"),
    hidden("large_logits", B=1, H=2, N=150, d=64, spread=6.0, scale=0.2),
]

triton_exercise(
    id="triton_flash_backward",
    hidden_sizes={"N": 64},
    module=MODULE,
    kernel="flash_backward",
    signature="flash_backward(q, k, v, o, lse, do, dq, dk, dv, scale): q, k, v, o, do torch tensors [B, H, N, d] "
              "(float16 or bfloat16, any strides), lse [B, H, N] float32 (the forward's natural-log logsumexp), scale "
              "a float; fills dq, dk, dv, torch tensors [B, H, N, d] float32. It may allocate its own scratch "
              "(D = rowsum(dO * O), [B, H, N] float32)",
    launch_shape="three launches: the preprocess D = rowsum(dO * O) (grid (triton.cdiv(N, BLOCK_M), B * H)); dK and "
                 "dV with one program per block of BLOCK_N keys of one head looping over query blocks of BLOCK_M "
                 "(grid (triton.cdiv(N, BLOCK_N), B * H)); dQ with one program per block of BLOCK_M queries looping "
                 "over key blocks (grid (triton.cdiv(N, BLOCK_M), B * H)), no atomics; d a tl.constexpr (64 or 128); "
                 "every tensor's strides passed (q, k, v, o and do may be [B, N, H, d] storage seen as [B, H, N, d])",
    make_inputs=_backward_inputs,
    outputs={n: (lambda p: ((p.B, p.H, p.N, p.d), F32)) for n in ("dQ", "dK", "dV")},
    reference=_backward_ref,
    args=lambda p, t: (t.Q, t.K, t.V, t.O, t.L, t.dO, t.dQ, t.dK, t.dV, _scale(p)),
    views=lambda p: {k: BNHD for k in BWD_VIEWS} if getattr(p, "layout", "") == "bnhd" else {},
    cases=BACKWARD_CASES,
    mistakes=_backward_mistakes(),
    magnitude=_backward_magnitude,
    case_tolerance=lambda p: PRODUCT_TOLERANCE[getattr(p, "dtype", "fp16")],
    nan_causes=BACKWARD_NAN,
)

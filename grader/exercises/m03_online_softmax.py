"""03_online_softmax: one pass for max and sum, warp shuffles, and merging partial states."""
import numpy as np

from .. import reference as ref
from ..exercise_rows import Mistake, case, exercise, hidden
from ..launch import ceil_div

MODULE = "03_online_softmax"
F32 = np.float32
WARP = 32


def _lane_states(x, rescale_lane):
    """Per-lane (m, l) for a warp where lane t reads columns t, t+32, ...; ``rescale_lane``
    False reproduces the classic bug of never rescaling l when the running max grows."""
    rows, cols = x.shape
    m = np.full((rows, WARP), -np.inf)
    l = np.zeros((rows, WARP))
    for j in range(cols):
        t = j % WARP
        xj = x[:, j]
        m_new = np.maximum(m[:, t], xj)
        factor = np.exp(m[:, t] - m_new) if rescale_lane else 1.0
        l[:, t] = l[:, t] * factor + np.exp(xj - m_new)
        m[:, t] = m_new
    return m, l


def _merge_lanes(m, l, partner, rescale=True):
    """One shuffle step: every lane t merges its (m, l) with lane ``partner[t]``'s; an empty
    lane (m = -inf, l = 0) adds nothing and two empty lanes stay empty (never NaN)."""
    m_o, l_o = m[:, partner], l[:, partner]
    m_new = np.maximum(m, m_o)
    if not rescale:
        return m_new, l + l_o
    shift = np.where(np.isneginf(m_new), 0.0, m_new)
    return m_new, l * np.exp(m - shift) + l_o * np.exp(m_o - shift)


def _softmax_with_shuffles(offsets, partner_of, rescale_lane=True, rescale_merge=True):
    """y as written by a warp that merges lane states with shuffles at ``offsets``;
    ``partner_of(lanes, offset)`` says whose state each lane receives. Column j is written
    by lane j % 32 with whatever (m, l) that lane ended with."""
    def wrong(p, x):
        xs = x["x"].astype(np.float64)
        m, l = _lane_states(xs, rescale_lane)
        lanes = np.arange(WARP)
        for off in offsets:
            m, l = _merge_lanes(m, l, partner_of(lanes, off), rescale_merge)
        t = np.arange(xs.shape[1]) % WARP
        return dict(y=np.exp(xs - m[:, t]) / l[:, t])

    return wrong


def _xor(lanes, off):
    return lanes ^ off


def _down(lanes, off):
    # __shfl_down_sync: a lane whose source t + off is past the warp gets its own value back
    return np.where(lanes + off < WARP, lanes + off, lanes)


def _wrong_softmax(rescale_lane, rescale_merge):
    return _softmax_with_shuffles((16, 8, 4, 2, 1), _xor, rescale_lane, rescale_merge)


def _max_starts_at_zero(p, x):
    """m initialised to 0 instead of -inf: harmless unless every logit of a row is so negative
    that e^{x - 0} underflows in float32; then l = 0 and y = 0/0. Computed in float32 on purpose."""
    xs = x["x"].astype(F32)
    m = np.maximum(xs.max(axis=1, keepdims=True), F32(0))
    e = np.exp(xs - m)
    with np.errstate(invalid="ignore", divide="ignore"):
        return dict(y=(e / e.sum(axis=1, keepdims=True)).astype(np.float64))


def _not_normalised(p, x):
    xs = x["x"].astype(np.float64)
    return dict(y=np.exp(xs - xs.max(axis=1, keepdims=True)))


def _logits(p, rng):
    """Standard normal logits times ``spread`` (sorted per row when ``rising``: the running
    max then grows at every step), plus ``offset``."""
    x = rng.standard_normal((p.rows, p.cols)) * p.spread
    if getattr(p, "rising", False):
        x = np.sort(x, axis=1)
    x[:, :1] += getattr(p, "first", 0.0)  # ``first``: column 0 far above the rest (the max falls after it)
    return (x + getattr(p, "offset", 0.0)).astype(F32)


exercise(
    id="online_softmax_rows",
    hidden_sizes={"cols": 32},
    module=MODULE,
    kernel="online_softmax_rows",
    signature="online_softmax_rows(const float* x, float* y, int rows, int cols)",
    launch_shape="grid = rows blocks, block = 32 threads (one warp per row); lane t reads columns t, t+32, ...; "
    "lanes merge their (m, l) with __shfl_xor_sync",
    make_inputs=lambda p, rng: dict(x=_logits(p, rng)),
    outputs=dict(y=lambda p: ((p.rows, p.cols), F32)),
    reference=lambda p, x: dict(y=ref.softmax_rows(x["x"])),
    args=lambda p, a: (a.x, a.y, np.int32(p.rows), np.int32(p.cols)),
    grid=lambda p: p.rows,
    block=lambda p: WARP,
    cases=[
        case("one_column", rows=3, cols=1, spread=1.0, seed=1),
        case("fewer_columns_than_lanes", rows=4, cols=20, spread=1.0, seed=2),
        case("one_warp_wide", rows=5, cols=32, spread=1.0, seed=3),
        case("rising_max", rows=6, cols=300, spread=3.0, rising=True, seed=4),
        case("large_logits", rows=4, cols=100, spread=1000.0, seed=5),
        case("long_rows", rows=3, cols=1000, spread=2.0, seed=6),
        # every logit below -104, where e^x underflows float32: only a max that starts at -inf works
        case("very_negative_logits", rows=4, cols=64, spread=20.0, offset=-200.0, seed=7),
        # column 0 lies 300 above the rest: a state re-measured against a later, smaller value
        # (instead of the running max) overflows, exp(300) = inf
        case("max_first_then_far_below", rows=4, cols=100, spread=2.0, first=300.0, seed=8),
        hidden("ragged", rows=7, cols=77, spread=4.0),
        hidden("large_logits_long", rows=2, cols=513, spread=500.0),
        hidden("very_negative_long", rows=3, cols=700, spread=5.0, offset=-150.0),
    ],
    mistakes=[
        Mistake("missing rescale in the lane loop", "when a new element raises a lane's running max m, "
                "multiply its running sum l by exp(m_old - m_new) before adding exp(x - m_new).",
                _wrong_softmax(rescale_lane=False, rescale_merge=True)),
        Mistake("missing rescale when merging lanes", "when two lanes merge, scale each l by "
                "exp(m_lane - m_merged) before adding: l = l_a*exp(m_a - m) + l_b*exp(m_b - m).",
                _wrong_softmax(rescale_lane=True, rescale_merge=False)),
        Mistake("running max starts at 0", "initialise m = -INFINITY, not 0: with m = 0 a row whose "
                "logits are all very negative gets e^{x - 0} = 0 everywhere, l = 0 and y = 0/0.",
                _max_starts_at_zero),
        Mistake("the shuffle reduction stops short", "lanes merged only within groups of 16 (or fewer): "
                "a butterfly over 32 lanes needs the offsets 16, 8, 4, 2, 1.",
                _softmax_with_shuffles((8, 4, 2, 1), _xor)),
        Mistake("reduced with __shfl_down_sync but never broadcast", "after a __shfl_down_sync "
                "reduction only lane 0 holds the whole row's (m, l); broadcast it with "
                "__shfl_sync(FULL_MASK, v, 0), or reduce with __shfl_xor_sync so every lane ends with it.",
                _softmax_with_shuffles((16, 8, 4, 2, 1), _down)),
        Mistake("y is not divided by l", "y = e^{x - m} / l: the exponentials are right but never normalised.",
                _not_normalised),
    ],
)


def _states(p, rng):
    """Partial states of two disjoint halves of a real key set; ``empty`` marks halves
    with no keys at all (m = -inf, l = 0, acc = 0)."""
    q = rng.standard_normal((p.rows, p.d)) * p.spread
    k = rng.standard_normal((p.keys, p.d))
    v = rng.standard_normal((p.keys, p.d))
    cut = p.keys // 3
    out = {}
    for side, sl in (("a", slice(0, cut)), ("b", slice(cut, None))):
        m, l, acc = ref.partial_state(q, k[sl], v[sl], scale=1.0)
        empty_rows = np.asarray(getattr(p, f"empty_{side}", ()), dtype=int)
        m[empty_rows], l[empty_rows], acc[empty_rows] = -np.inf, 0.0, 0.0
        out |= {f"m_{side}": m.astype(F32), f"l_{side}": l.astype(F32), f"acc_{side}": acc.astype(F32)}
    return out


def _merge_ref(p, x):
    m, l, acc = ref.merge_states((x["m_a"], x["l_a"], x["acc_a"]), (x["m_b"], x["l_b"], x["acc_b"]))
    return dict(m_out=m, l_out=l, acc_out=acc)


def _merge_without_rescale(p, x):
    m = np.maximum(x["m_a"], x["m_b"]).astype(np.float64)
    return dict(m_out=m, l_out=x["l_a"].astype(np.float64) + x["l_b"], acc_out=x["acc_a"].astype(np.float64) + x["acc_b"])


def _acc_not_rescaled(p, x):
    m, l, _ = ref.merge_states((x["m_a"], x["l_a"], x["acc_a"]), (x["m_b"], x["l_b"], x["acc_b"]))
    return dict(m_out=m, l_out=l, acc_out=x["acc_a"].astype(np.float64) + x["acc_b"])


def _merge_size(p, x):
    """The size of the terms of each merged value: alpha*|l_a| + beta*|l_b| (and acc likewise),
    times 1 + |m| for the rounding of the exponent m_a - m."""
    ma, mb = (np.asarray(x[n], np.float64) for n in ("m_a", "m_b"))
    m = np.maximum(ma, mb)
    shift = np.where(np.isneginf(m), 0.0, m)
    a, b = np.exp(ma - shift), np.exp(mb - shift)
    g = 1.0 + np.maximum(np.abs(np.where(np.isfinite(ma), ma, 0.0)), np.abs(np.where(np.isfinite(mb), mb, 0.0)))
    return dict(l_out=(a * np.abs(x["l_a"]) + b * np.abs(x["l_b"])) * g,
                acc_out=(a[:, None] * np.abs(x["acc_a"]) + b[:, None] * np.abs(x["acc_b"])) * g[:, None])


exercise(
    id="merge_states",
    hidden_sizes={"d": 8, "keys": 16},
    module=MODULE,
    kernel="merge_states",
    signature="merge_states(const float* m_a, const float* l_a, const float* acc_a, const float* m_b, "
    "const float* l_b, const float* acc_b, float* m_out, float* l_out, float* acc_out, int rows, int d)",
    launch_shape="block = 32 threads, grid = (ceil_div(d, 32), rows); thread (x) of block (bx, r) merges "
    "column bx*32 + x of row r's acc; the thread with column 0 also writes m_out[r] and l_out[r]",
    make_inputs=_states,
    magnitude=_merge_size,
    outputs=dict(m_out=lambda p: ((p.rows,), F32), l_out=lambda p: ((p.rows,), F32), acc_out=lambda p: ((p.rows, p.d), F32)),
    reference=_merge_ref,
    args=lambda p, a: (a.m_a, a.l_a, a.acc_a, a.m_b, a.l_b, a.acc_b, a.m_out, a.l_out, a.acc_out, np.int32(p.rows), np.int32(p.d)),
    grid=lambda p: (ceil_div(p.d, 32), p.rows),
    block=lambda p: 32,
    cases=[
        case("one_row", rows=1, d=8, keys=12, spread=1.0, seed=1),
        case("head_dim_64", rows=16, d=64, keys=40, spread=2.0, seed=2),
        case("odd_head_dim", rows=9, d=40, keys=30, spread=1.0, seed=3),
        case("large_scores", rows=8, d=32, keys=50, spread=30.0, seed=4),
        case("empty_sides", rows=6, d=16, keys=20, spread=1.0, empty_a=(1, 3), empty_b=(2, 3), seed=5),
        case("both_sides_empty", rows=5, d=40, keys=20, spread=1.0, empty_a=(0, 1, 2, 4), empty_b=(0, 2, 3, 4), seed=6),
        hidden("ragged", rows=13, d=72, keys=33, spread=5.0, empty_a=(0,)),
        hidden("head_dim_128", rows=4, d=128, keys=64, spread=1.0, empty_b=(1,)),
    ],
    mistakes=[
        Mistake("missing rescale", "the two states were measured against different maxima: "
                "l = l_a*exp(m_a - m) + l_b*exp(m_b - m) with m = max(m_a, m_b), and acc likewise.",
                _merge_without_rescale),
        Mistake("acc is not rescaled", "l was rescaled but acc was not: acc = acc_a*exp(m_a - m) + "
                "acc_b*exp(m_b - m), with the same two factors as l.",
                _acc_not_rescaled),
    ],
)

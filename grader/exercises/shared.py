"""Inputs, magnitudes and mistake models that more than one module's exercises use: the attention
forwards and backwards, and the tensor-core fragment layouts."""
import numpy as np

from .. import reference as ref
from ..exercise_rows import Mistake

F16, F32 = np.float16, np.float32


FIRST_KEYS = 16  # ``falling`` lifts the first 16 keys: the first key tile of every exercise (16 or 32 wide)


def qkv(p, rng):
    """Q, K, V as float32 [B, H, N, d]; ``spread`` scales Q (large logits; 0: every score 0), and
    ``rising`` makes later keys score higher for every query, so the running max grows tile after
    tile; then :func:`extreme_scores`; ``v_offset`` shifts V (with ``spread=0`` the unnormalised
    output sums about N·v_offset, past half precision's 65504 once that is: an accumulator kept in
    half overflows where a float one stays exact)."""
    shape = (p.B, p.H, p.N, p.d)
    q = rng.standard_normal(shape) * getattr(p, "spread", 1.0)
    k = rng.standard_normal(shape)
    v = rng.standard_normal(shape)
    if getattr(p, "rising", False):
        q[..., 0] = np.abs(q[..., 0]) + 1.0
        k[..., 0] += np.linspace(0.0, 6.0, p.N)
    extreme_scores(p, q, k)
    v += getattr(p, "v_offset", 0.0)
    return dict(Q=q.astype(F32), K=k.astype(F32), V=v.astype(F32))


def extreme_scores(p, q, k):
    """Extreme but legal logits, in place: every query's score for key j moved by a chosen offset
    (through feature 0: q[..., 0] = 1 and k[..., j, 0] = offset_j / scale).
    ``negative=X``: every score is about -X (X > 87: exp(s) underflows, so a max that starts at
    0 instead of -inf fails); ``falling=X``: the first 16 keys (in the first key tile) score X
    above the rest, so later tiles' maxima lie far *below* the running max; ``late_peak=X``:
    the last key scores X above the rest, so the max arrives in the last tile. Every exercise's
    input maker that offers these parameters calls this (tests/checks/test_case_params.py checks it)."""
    offset = np.zeros(k.shape[-2])
    offset -= getattr(p, "negative", 0.0)
    offset[:FIRST_KEYS] += getattr(p, "falling", 0.0)
    offset[-1] += getattr(p, "late_peak", 0.0)
    if offset.any():
        q[..., 0] = 1.0
        k[..., 0] = offset / float(scale_of(p))


def scale_of(p):
    return F32(getattr(p, "scale", 1.0 / np.sqrt(p.d)))


# --- the size of the terms behind each output (the tolerance scales with it, see grader/judge.py)


def keep_mask(n, causal=False, key_lengths=None):
    """[B or 1, 1, N, N] boolean keep-mask, or None for no mask."""
    keep = None
    if causal:
        keep = (np.arange(n)[None, :] <= np.arange(n)[:, None])[None, None]
    if key_lengths is not None:
        by_len = (np.arange(n)[None, :] < np.asarray(key_lengths)[:, None])[:, None, None, :]
        keep = by_len if keep is None else keep & by_len
    return keep


def score_sizes(q, k, scale, keep=None):
    """(T, R): T_ij = |scale| * sum_c |q_ic k_jc| (the size of the terms of score s_ij) and
    R_i = max over the visible keys j of T_ij (0 for a row with none)."""
    t = abs(scale) * (np.abs(np.asarray(q, np.float64)) @ np.swapaxes(np.abs(np.asarray(k, np.float64)), -1, -2))
    if keep is not None:
        t = np.where(keep, t, 0.0)
    return t, t.max(axis=-1, initial=0.0)


def forward_magnitude(x, scale, causal=False, key_lengths=None):
    """{O, L}: (1 + R_i) * sum_j P_ij |V_jc| and |L_i| + R_i. A float32 score carries an absolute
    error of a few ulps of R_i, which exp turns into a relative error of P_ij."""
    keep = keep_mask(x["Q"].shape[-2], causal, key_lengths)
    _, r = score_sizes(x["Q"], x["K"], scale, keep)
    s = ref.scaled_scores(x["Q"], x["K"], scale)
    if keep is not None:
        s = np.where(keep, s, -np.inf)
    pr = ref.softmax_rows(s)
    o = (1.0 + r)[..., None] * (pr @ np.abs(np.asarray(x["V"], np.float64)))
    lse = np.abs(ref.finalize_state(ref.partial_state(x["Q"], x["K"], x["V"], scale=scale, mask=keep))[1])
    return dict(O=o, L=np.where(np.isfinite(lse), lse, 0.0) + r)


def backward_magnitude(x, scale, causal=False, keep=None):
    """{dQ, dK, dV, D}: the backward outputs' sizes, built from P (with its relative error
    (1 + R_i) from the scores), |dP| = |dO| |V|^T and |D|; ``keep`` a mask in place of the causal one
    (D only when ``x`` holds O)."""
    q, k, v, do = (np.asarray(x[n], np.float64) for n in ("Q", "K", "V", "dO"))
    keep = keep_mask(q.shape[-2], causal) if keep is None else keep
    _, r = score_sizes(q, k, scale, keep)
    with np.errstate(over="ignore"):
        pr = np.exp(scale * q @ np.swapaxes(k, -1, -2) - np.asarray(x["L"], np.float64)[..., None])
    if keep is not None:
        pr = np.where(keep, pr, 0.0)
    pg = pr * (1.0 + r)[..., None]
    ds = pg * (np.abs(do) @ np.swapaxes(np.abs(v), -1, -2) + np.abs(np.asarray(x["D"], np.float64))[..., None])
    sizes = dict(dV=np.swapaxes(pg, -1, -2) @ np.abs(do), dK=abs(scale) * np.swapaxes(ds, -1, -2) @ np.abs(q),
                 dQ=abs(scale) * ds @ np.abs(k))
    if "O" in x:
        sizes["D"] = (np.abs(do) * np.abs(np.asarray(x["O"], np.float64))).sum(-1)
    return sizes


def forward_with_mask(x, scale, mask):
    """(O, L) of attention under an arbitrary boolean mask [B or 1, 1, N, N] (True = keep)."""
    return ref.finalize_state(ref.partial_state(x["Q"], x["K"], x["V"], scale=scale, mask=mask))


# A tensor-core kernel's mask with the key index of its C fragment built from g (the lane's row
# group, lane / 4) instead of t (its place in the quad, lane % 4).
KEY_FROM_G = ("key index built from g", "score e of the C fragment's 8-key block n holds key 8n + 2t + e % 2 of the "
              "tile: a lane's keys come from t = lane % 4, its place in the quad; g = lane / 4 names its rows.")


def key_from_g_forward(x, scale, n, tile, causal, visited, masked):
    """(O, L) of a kernel whose mask compares key j of a tile as key 8 (j // 8) + 2 g + j % 2 (g = row
    % 8), against N and (causal) the row: the row's tiles are those with ``visited(i, start)`` ([N, 1]
    rows, [1, n_pad] tile starts), the mask runs where ``masked(i, start)`` and every key of the other
    visited tiles counts. A masked tile's zero-filled keys past N (score 0, value 0) count wherever
    that index falls below N."""
    n_pad = -(-n // tile) * tile
    i, j = np.arange(n)[:, None], np.arange(n_pad)[None, :]
    start = j // tile * tile
    seen = j // 8 * 8 + 2 * (i % 8) + j % 2
    kept = (seen < n) & ((seen <= i) if causal else True)
    keep = visited(i, start) & np.where(masked(i, start), kept, j < n)
    grown = {name: np.concatenate([np.asarray(x[name], np.float64),
                                   np.zeros(x[name].shape[:-2] + (n_pad - n, x[name].shape[-1]))], axis=-2)
             for name in "KV"}
    return forward_with_mask(dict(x, **grown), scale, keep[None, None])


def tiled_forward(x, scale, bc, *, rescale_acc=True, rescale_l=True, tiles=None, running_max=True, keep=None,
                  alpha_power=1.0):
    """FlashAttention's loop over key tiles of ``bc`` keys in float64, with switches that
    reproduce the classic bugs: forgetting to rescale the accumulator or the running sum
    when a later tile raises the max, processing only the first ``tiles`` tiles, or
    (``running_max=False``) measuring the state against each tile's own max instead of the
    running max: exact, until a tile's max lies more than 88.7 below the previous one and
    float32's exp(m_old - m_tile) overflows to inf. ``alpha_power``: the rescale factor is
    exp(m_old - m_new) raised to this power (-1: inverted, exp(m_new - m_old); log2(e): expf
    applied to maxima kept in the log2 domain), 0 while the row has seen no key."""
    q, k, v = (np.asarray(x[n], np.float64) for n in ("Q", "K", "V"))
    n = k.shape[-2]
    m = np.full(q.shape[:-1], -np.inf)
    ell = np.zeros(q.shape[:-1])
    acc = np.zeros(q.shape)
    for t, start in enumerate(range(0, n, bc)):
        if tiles is not None and t >= tiles:
            break
        tile_keep = None if keep is None else keep[..., start:start + bc]
        m_t, l_t, acc_t = ref.partial_state(q, k[..., start:start + bc, :], v[..., start:start + bc, :], scale=scale,
                                            mask=tile_keep)
        m_new = np.maximum(m, m_t) if running_max else np.where(np.isneginf(m_t), m, m_t)
        shift = np.where(np.isneginf(m_new), 0.0, m_new)  # no key yet: exp(-inf - 0) = 0, not NaN
        with np.errstate(over="ignore", invalid="ignore"):
            alpha = np.where(np.isneginf(m), 0.0, np.exp((m - shift) * alpha_power))
            beta = np.exp(m_t - shift)
        if not running_max:
            with np.errstate(invalid="ignore"):
                alpha = np.where(m - m_new > 88.72, np.inf, alpha)  # float32 exp overflows there
        with np.errstate(invalid="ignore"):
            ell = (alpha if rescale_l else 1.0) * ell + beta * l_t
            acc = (alpha[..., None] if rescale_acc else 1.0) * acc + beta[..., None] * acc_t
        m = m_new
    if not running_max:
        with np.errstate(invalid="ignore", divide="ignore"):
            return acc / ell[..., None], m + np.log(ell)
    return ref.finalize_state((m, ell, acc))


def max_from_zero(x, scale, keep=None):
    """(O, L) of a kernel whose running max starts at 0: m = max(0, scores), exp in float32."""
    s = ref.scaled_scores(x["Q"], x["K"], scale)
    if keep is not None:
        s = np.where(keep, s, -np.inf)
    m = np.maximum(s.max(axis=-1, keepdims=True), 0.0)
    e = np.exp((s - m).astype(F32)).astype(np.float64)
    ell = e.sum(-1)
    # l = 0: a kernel that guards l > 0 writes the empty row (O = 0, L = -inf); one that does
    # not writes 0/0 = NaN, which the check also accepts as this mistake.
    with np.errstate(invalid="ignore", divide="ignore"):
        o = np.where(ell[..., None] > 0, (e @ np.asarray(x["V"], np.float64)) / ell[..., None], 0.0)
        return o, np.where(ell > 0, m[..., 0] + np.log(ell), -np.inf)


def forward_mistakes(Mistake, bc, keep=None):
    """Named diagnoses every forward exercise shares (its key tile is ``bc`` keys wide);
    ``keep(p, x)`` gives the exercise's keep-mask (causal, padding) or None."""

    def as_dict(ol):
        return dict(O=ol[0], L=ol[1])

    def mask(p, x):
        return None if keep is None else keep(p, x)

    def sc(p):
        return float(scale_of(p))

    def correct(p, x, scale=None):
        return forward_with_mask(x, sc(p) if scale is None else scale, mask(p, x))

    def tiled(p, x, **kw):
        return as_dict(tiled_forward(x, sc(p), bc, keep=mask(p, x), **kw))

    return [
        Mistake("missing rescale of the output accumulator",
                f"when tile j raises a row's max from m_old to m_new, the accumulated output must be multiplied by "
                f"exp(m_old - m_new) before adding the new tile's P V (key tiles here are {bc} wide).",
                lambda p, x: tiled(p, x, rescale_acc=False) if p.N > bc else None),
        Mistake("missing rescale of the running sum",
                "when the max grows, l must be multiplied by exp(m_old - m_new) before adding the new tile's row sum.",
                lambda p, x: tiled(p, x, rescale_l=False) if p.N > bc else None),
        Mistake("only the first key tile processed", "loop over all ceil_div(N, BC) key tiles.",
                lambda p, x: tiled(p, x, tiles=1) if p.N > bc else None),
        Mistake("L in base 2", "L is the natural-log logsumexp: L = m + log(l) with m and l of exp(s - m); a kernel "
                "that works in base 2 (exp2, m in units of log2(e)) converts at the end: L = (m + log2(l)) * ln 2.",
                lambda p, x: dict(L=correct(p, x)[1] * np.log2(np.e))),
        Mistake("L without the max", "L = m + log(l): the running sum l is measured relative to the max m.",
                lambda p, x: dict(L=correct(p, x)[1] - _finite0(ref.partial_state(x["Q"], x["K"], x["V"], scale=sc(p),
                                                                                   mask=mask(p, x))[0]))),
        Mistake("output not divided by l",
                "after the last key tile O = acc / l: acc sums exp(s - m) v over the keys, and dividing by the row's "
                "l = sum of exp(s - m) turns that sum into the weighted average (L = m + log(l) is unaffected).",
                lambda p, x: dict(O=_finite0(ref.partial_state(x["Q"], x["K"], x["V"], scale=sc(p), mask=mask(p, x))[2]))),
        Mistake("running max starts at 0",
                "initialise m to -inf (-INFINITY in CUDA C), not 0: in a row whose scores are all below about -87, exp(s - 0) "
                "underflows to 0 for every key, so l = 0, O = 0/0 = NaN and L = log(0).",
                lambda p, x: as_dict(max_from_zero(x, sc(p), mask(p, x))) if getattr(p, "negative", 0) else None),
        Mistake("state rescaled with the tile's max instead of the running max",
                "m_new = max(m_old, m_tile): when a later key tile's max lies far below the running max, "
                "measuring l and O against m_tile makes exp(m_old - m_tile) overflow to inf.",
                lambda p, x: tiled(p, x, running_max=False) if getattr(p, "falling", 0) else None),
        Mistake("the last partial key tile skipped",
                f"the number of key tiles is ceil_div(N, {bc}), not N / {bc}: with N not a multiple of {bc} the "
                "rounded-down count never visits the last keys.",
                lambda p, x: (as_dict(forward_with_mask(x, sc(p), _and(mask(p, x), _key_index(p) < p.N // bc * bc)))
                              if p.N % bc else None)),
        Mistake("rescale factor inverted",
                "when the max grows from m_old to m_new, the state shrinks: multiply l and O by exp(m_old - m_new) "
                "(at most 1), not exp(m_new - m_old).",
                lambda p, x: tiled(p, x, alpha_power=-1.0) if p.N > bc else None),
        Mistake("rescale factor taken with expf on log2-domain maxima",
                "with the scores kept in the log2 domain (scaled by log2(e) for exp2f), the rescale factor is "
                "exp2f(m_old - m_new) too: expf there raises it to the power log2(e).",
                lambda p, x: tiled(p, x, alpha_power=float(np.log2(np.e))) if p.N > bc else None),
        Mistake("log2(e) not folded into the scale",
                "exp2f(x) is e^(x ln 2): to get e^(s - m) from exp2f, multiply the scores (and the max) by "
                "log2(e) = 1.4426950408889634 first, e.g. fold it into the scale once.",
                lambda p, x: as_dict(correct(p, x, scale=sc(p) * float(np.log(2.0))))),
        Mistake("L's log term in the wrong base",
                "L = m + logf(l) with both terms natural: with the max kept in the log2 domain, convert it "
                "(m2 * ln 2) and add logf(l), or take (m2 + log2f(l)) * ln 2; (m2 + logf(l)) * ln 2 scales the log "
                "term by ln 2.",
                lambda p, x: dict(L=_lse_with_log_scaled(p, x, sc(p), mask(p, x), float(np.log(2.0))))),
        Mistake("L in base 2", "L is the natural-log logsumexp: L = m + log(l) (logf in CUDA C), not m + log2(l).",
                lambda p, x: dict(L=_lse_with_log_scaled(p, x, sc(p), mask(p, x), 1.0 / float(np.log(2.0))))),
        *([] if keep is not None else [unmasked_tail_mistake(Mistake, bc), Mistake(
            "row max taken before the mask",
            "the row max must cover only the keys that count: set the scores of keys past N to -INFINITY before "
            "the max. A zero-filled key past N scores 0, so a max taken before the mask is at least 0, and where "
            "every real score is below about -87, exp(s - m) underflows to 0 for all of them.",
            lambda p, x: as_dict(max_from_zero(x, sc(p))) if getattr(p, "negative", 0) and p.N % bc else None)]),
        Mistake("scale computed from d instead of the scale argument",
                "use the kernel's `scale` argument: the caller may pass any scale, not only 1/sqrt(d).",
                lambda p, x: as_dict(correct(p, x, scale=float(F32(1.0 / np.sqrt(p.d)))))
                if not np.isclose(sc(p), 1.0 / np.sqrt(p.d)) else None),
        Mistake("scale never applied", "scores are scale * (q . k); multiply once.",
                lambda p, x: as_dict(correct(p, x, scale=1.0))),
        Mistake("scale applied twice", "scores are scale * (q . k); multiply once"
                " (at the default scale 1/sqrt(d) the same numbers come from dividing by d instead of sqrt(d)).",
                lambda p, x: as_dict(correct(p, x, scale=sc(p) ** 2))),
    ]


def _finite0(m):
    return np.where(np.isfinite(m), m, 0.0)


def _key_index(p):
    return np.arange(p.N)[None, :]


def _and(keep, extra):
    return extra if keep is None else keep & extra


def _lse_with_log_scaled(p, x, scale, keep, factor):
    """L = m + factor * log(l) (the natural max m, the log of the row sum in another base)."""
    state = ref.partial_state(x["Q"], x["K"], x["V"], scale=scale, mask=keep)
    m, lse = state[0], ref.finalize_state(state)[1]
    with np.errstate(invalid="ignore"):
        return np.where(np.isfinite(lse), m + factor * (lse - m), lse)


OUTPUTS = dict(O=lambda p: ((p.B, p.H, p.N, p.d), F32), L=lambda p: ((p.B, p.H, p.N), F32))


# --- more forward mistakes (added for 04_flash_forward; other modules may use them too) ---------


def unmasked_zero_keys(x, bc):
    """Inputs whose K and V are zero-padded to a multiple of ``bc`` keys: what a kernel computes
    when it zero-fills the last partial key tile but lets the padding keys (score 0) into the softmax."""
    n = x["K"].shape[-2]
    pad = (-n) % bc
    if pad == 0:
        return None
    widths = [(0, 0)] * (x["K"].ndim - 2) + [(0, pad), (0, 0)]
    return dict(Q=x["Q"], K=np.pad(x["K"], widths), V=np.pad(x["V"], widths))


def unmasked_tail_mistake(Mistake, bc):
    def wrong(p, x):
        padded = unmasked_zero_keys(x, bc)
        if padded is None:
            return None
        o, lse = ref.attention_forward(padded["Q"], padded["K"], padded["V"], scale=float(scale_of(p)))
        return dict(O=o, L=lse)

    return Mistake("keys past N not masked",
                   f"the last key tile is partial when N is not a multiple of {bc}: its missing keys (zero-filled "
                   "here) must get the score -INFINITY (or be skipped), so they add nothing to the max, l or O.",
                   wrong)


def row_pairs_mistake(Mistake, br):
    """A row max and row sum reduced across two query rows (a warp-wide butterfly, width 32,
    over a tile whose rows are 16 lanes wide): rows 2k and 2k+1 of each ``br``-row tile share
    one max and one sum. Query rows past N are zero (the kernel zero-fills its Q tile)."""

    def wrong(p, x):
        scale = float(scale_of(p))
        q = np.asarray(x["Q"], np.float64)
        n = q.shape[-2]
        pad = (-n) % br  # br is even, so every row has its partner row ^ 1
        q = np.pad(q, [(0, 0)] * (q.ndim - 2) + [(0, pad), (0, 0)])
        o, lse = ref.attention_forward(q, x["K"], x["V"], scale=scale)
        partner = np.arange(q.shape[-2]) ^ 1
        pair = np.logaddexp(lse, lse[..., partner])
        o = o * np.exp(lse - pair)[..., None]
        return dict(O=o[..., :n, :], L=pair[..., :n])

    return Mistake("row max and sum reduced over the wrong width",
                   "a row of the score tile is 16 lanes of a warp: reduce with __shfl_xor_sync(FULL_MASK, v, "
                   "offset, 16) for offset = 8, 4, 2, 1. With offsets from 16 (width 32) two rows share one "
                   "max and one sum.", wrong)




def tile_skipping_io(rows_per_block, bc, elem_bytes, slack=1.15, backward=False, padded=False, causal=None):
    """An ``io_check`` for masked kernels: the other side must be read about once per tile that a
    block needs, not once per tile of the whole sequence. Causal forward (a block owns
    ``rows_per_block`` query rows): K and V tiles of ``bc`` keys up to the block's last row.
    ``backward`` (a block owns key rows): Q and dO tiles of ``bc`` queries from the one holding the
    block's first key on (with ``padded``, none for a block of padding keys). ``padded``: K and V tiles up to the batch entry's key length. ``causal``
    (default: a forward that is not padded) with ``padded``: both limits, the smaller one."""
    names = ("Q", "dO") if backward else ("K", "V")
    causal = (not padded and not backward) if causal is None else causal

    def needed_bytes(p, padded=padded, causal=causal):
        """The bytes a kernel that skips tiles by these limits reads (the checks' test asks that the
        io_case tells each limit apart: dropping one must read more than ``slack`` times this)."""
        lengths = getattr(p, "lengths", (p.N,) * p.B)

        def rows_needed(r0, n, length):
            if backward:
                return 0 if padded and r0 >= length else n - r0 // bc * bc
            need = n
            if padded:
                need = min(-(-length // bc) * bc, need)
            if causal:
                need = min(((min(r0 + rows_per_block, n) - 1) // bc + 1) * bc, need)
            return need

        rows = sum(rows_needed(r0, p.N, lengths[b]) for b in range(p.B) for r0 in range(0, p.N, rows_per_block))
        return rows * len(names) * p.d * elem_bytes * p.H

    def check(io, p):
        needed = needed_bytes(p)
        read = sum(io.per_array[name][0] for name in names)
        if read <= slack * needed:
            return None
        if backward:
            skip = (f"a block may skip every query tile that lies entirely above the diagonal for its keys (all its "
                    f"rows before the block's first key): start at the tile holding that key, first_key / {bc} * {bc}"
                    + (" (and a block whose keys are all padding has nothing to read)" if padded else ""))
        elif padded and causal:
            skip = (f"a block may skip every key tile that is all padding or lies entirely above its last query row: "
                    f"loop over min(ceil_div(key_lengths[b], {bc}), last_row / {bc} + 1) tiles, not over all of them")
        elif padded:
            skip = (f"a block may skip every key tile that is all padding: loop over ceil_div(key_lengths[b], {bc}) "
                    "tiles, not over all of them")
        else:
            skip = (f"a block may skip every key tile that lies entirely above its last query row (keys past it are "
                    f"all masked): loop over last_row / {bc} + 1 tiles, not over all of them")
        return (f"your kernel read {read / needed:.2f}x the {' and '.join(names)} bytes that loading each needed tile "
                f"once needs ({read} bytes, {needed} needed). {skip[0].upper() + skip[1:]}; and load each tile once "
                "per block (into shared memory), not once per thread.")

    check.needed_bytes, check.slack = needed_bytes, slack
    check.limits = {k: v for k, v in dict(padded=padded, causal=causal).items() if v and not backward}
    return check


def forward_ref(p, x):
    o, lse = ref.attention_forward(x["Q"], x["K"], x["V"], scale=float(scale_of(p)))
    return dict(O=o, L=lse)


# --------------------------------------------------------------------------- tensor-core fragment layouts
# What a kernel computes when it gets one of the fragment layouts of grader/fragments.py wrong,
# simulated in float64 so that a check can say which one (modules 08 to 11 use them).

WARP_ROWS = 16  # rows of one mma tile: what a warp owns


def as_f64(x):
    return np.asarray(x, np.float64)


def pad_to(x, axis, multiple):
    """``x`` zero-padded along ``axis`` to a multiple of ``multiple`` (what a kernel's zero-filled tile holds)."""
    pad = [(0, 0)] * x.ndim
    pad[axis] = (0, (-x.shape[axis]) % multiple)
    return np.pad(x, pad)


def blocks8_transposed(x):
    """Every aligned 8 x 8 block of the last two axes transposed in place (x zero-padded to
    multiples of 8): what a matrix looks like through ldmatrix with the wrong ``.trans``."""
    rows, cols = x.shape[-2:]
    y = pad_to(pad_to(x, -2, 8), -1, 8)
    r8, c8 = y.shape[-2] // 8, y.shape[-1] // 8
    y = y.reshape(*y.shape[:-2], r8, 8, c8, 8).swapaxes(-1, -3).reshape(*y.shape[:-2], 8 * r8, 8 * c8)
    return y[..., :rows, :cols]


def matrices_crossed(x):
    """``x`` (rows x columns, zero-padded to multiples of 16 of each) as an ldmatrix_x4 returns it when
    the lane's address takes its row half from lane / 8 / 2 and its column half from lane / 8 % 2, the
    reverse of the operand's order: in every 16 x 16 block, rows 8-15 of columns 0-7 and rows 0-7 of
    columns 8-15 trade places, the block's two row halves crossed with its two column halves. The same
    for K's B fragments (rows: keys), Q's A fragments (rows: queries) and V's .trans B fragments
    (rows: keys, columns: d)."""
    rows, cols = x.shape[-2:]
    y = pad_to(pad_to(x, -2, 16), -1, 16)
    g, c = y.shape[-2] // 16, y.shape[-1] // 16
    y = y.reshape(*y.shape[:-2], g, 2, 8, c, 2, 8).swapaxes(-5, -2).reshape(*y.shape[:-2], 16 * g, 16 * c)
    return y[..., :rows, :cols]


K_MATRICES = ("K's four ldmatrix matrices in the wrong order",
              "the B fragments of keys 8n .. 8n + 15 come from one ldmatrix_x4 whose matrix m = lane / 8 is "
              "keys 8n + 8 (m / 2) .., columns 16kk + 8 (m % 2) ..: registers 0 and 1 are the two column halves "
              "of key block n, registers 2 and 3 those of block n + 1. With m % 2 and m / 2 swapped in the address, "
              "each key block takes half its columns from the other block's keys.")
# The A fragments' order, and the .trans B fragments' (V in P V, B of a row-major matmul), as an
# ldmatrix_x4 gives them; a lane address with the two halves swapped trades registers 1 and 2.
_A_ORDER = ("the A fragment of rows r0 .. r0 + 15, columns 16kk .. 16kk + 15 is {rows 0-7, rows 8-15} of columns "
            "0-7, then of columns 8-15: lane l gives the address of row r0 + l % 16, column 16kk + 8 (l / 16). "
            "With the row half taken from l / 16 and the column half from l / 8 % 2, registers 1 and 2 trade places")
_TRANS_B_ORDER = ("the .trans load of rows 16kk .. 16kk + 15, columns 8n .. 8n + 15 takes its matrix m = lane / 8 "
                  "from rows 16kk + 8 (m % 2) .., columns 8n + 8 (m / 2) ..: registers 0 and 1 are the two row halves "
                  "of column block n, 2 and 3 those of block n + 1. With m % 2 and m / 2 swapped in the address")
Q_MATRICES = ("Q's four ldmatrix matrices in the wrong order",
              _A_ORDER + ": each query's scores use half of another query's Q.")
V_MATRICES = ("V's four ldmatrix matrices in the wrong order",
              "for P V, V's rows are keys. " + _TRANS_B_ORDER + ", half of each output column is summed over another "
              "column's values.")
A_MATRICES = ("A's four ldmatrix matrices in the wrong order",
              _A_ORDER + ": each row of C takes half its products from another row of A.")
B_MATRICES = ("B's four ldmatrix matrices in the wrong order",
              "B's rows are k. " + _TRANS_B_ORDER + ", half of each column of C sums another column's products.")


def c_rows_paired(x):
    """Rows of ``x`` [..., rows, cols] moved as by a store that puts accumulator float i of lane
    (g, t) in row 2g + i / 2 instead of g + 8 (i / 2): in each 16-row tile, row g + 8h lands in
    row 2g + h. Rows computed from padding (past the end) land in real rows too."""
    rows = x.shape[-2]
    y = pad_to(x, -2, WARP_ROWS)
    shape = y.shape
    y = y.reshape(*shape[:-2], shape[-2] // WARP_ROWS, 2, 8, shape[-1])  # row = 16a + 8h + g
    return y.swapaxes(-3, -2).reshape(shape)[..., :rows, :]  # row = 16a + 2g + h


C_ROWS = ("C fragment stored to the wrong rows",
          "accumulator float i of lane (g = lane / 4, t = lane % 4) is row g + 8 * (i / 2), column 2t + i % 2: "
          "c[0], c[1] belong to row g and c[2], c[3] to row g + 8, not to rows 2g and 2g + 1.")
C_ROWS_SWAPPED = (C_ROWS[0], "accumulator float i of lane (g = lane / 4, t = lane % 4) is row g + 8 * (i / 2): c[0], "
                  "c[1] belong to row g and c[2], c[3] to row g + 8, not the other way round.")

def matmul_ref(p, x):
    return dict(C=ref.matmul(x["A"], x["B"]))


def _first_k_tile(depth):
    return Mistake("only the first tile along K", f"loop over all ceil_div(K, {depth}) steps along K, not just the first.",
                   lambda p, x: dict(C=ref.matmul(x["A"][:, :depth], x["B"][:depth])) if p.K > depth else None)


def k_step_mistakes(depth):
    """What a loop over K steps of ``depth`` gets wrong: only the first step, only the last one (the
    accumulators zeroed inside the loop), or only the first 16-deep mma slice of each step."""
    def slices(p, x, keep_k):
        k = np.arange(p.K)
        return dict(C=ref.matmul(x["A"][:, keep_k(k)], x["B"][keep_k(k)]))

    def last(k):
        return (k - 1) // depth * depth

    mistakes = [
        _first_k_tile(depth),
        Mistake("only the last tile along K",
                "the accumulators must live across the whole loop over K: declare and zero them once before it "
                "(zeroed inside, each step wipes the sum of the steps before it).",
                lambda p, x: slices(p, x, lambda k: k >= last(p.K)) if p.K > depth else None),
    ]
    if depth > 16:
        mistakes.append(Mistake(
            "only the first mma slice of each K step",
            f"a step of {depth} along K takes {depth // 16} mma of k = 16: loop kk over 0..{depth // 16 - 1}, "
            "advancing the A and B fragments' k by 16 each time.",
            lambda p, x: slices(p, x, lambda k: k % depth < 16) if p.K > 16 else None))
    return mistakes


def operands_crossed():
    """A's and B's fragments loaded with crossed ldmatrix matrices (:func:`matrices_crossed`, rows and
    columns zero-filled past the edges as the tiles are)."""
    return [Mistake(*A_MATRICES, lambda p, x: dict(C=ref.matmul(matrices_crossed(as_f64(x["A"])), x["B"]))),
            Mistake(*B_MATRICES, lambda p, x: dict(C=ref.matmul(x["A"], matrices_crossed(as_f64(x["B"])))))]


def c_rows_halves_swapped(x):
    """Rows as stored by a lane that writes c[0], c[1] to row g + 8 and c[2], c[3] to row g: in each
    16-row tile the two halves of 8 rows trade places."""
    rows = x.shape[-2]
    y = pad_to(x, -2, WARP_ROWS)
    shape = y.shape
    y = y.reshape(*shape[:-2], shape[-2] // WARP_ROWS, 2, 8, shape[-1])[..., ::-1, :, :]
    return y.reshape(shape)[..., :rows, :]


def half_accumulation(p, x):
    """The accumulator rounded to half after every mma (k = 16 products summed exactly, then to
    float, as the tensor core does, then to half)."""
    a, b = as_f64(x["A"]), as_f64(x["B"])
    acc = np.zeros((p.M, p.N))
    for k in range(0, p.K, 16):
        acc = (acc + a[:, k:k + 16] @ b[k:k + 16]).astype(F32).astype(F16).astype(np.float64)
    return dict(C=acc)

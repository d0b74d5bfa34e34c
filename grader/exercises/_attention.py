"""Inputs and known-wrong forward computations shared by the FlashAttention exercises."""
import numpy as np

from .. import reference as ref

F32 = np.float32


def qkv(p, rng):
    """Q, K, V as float32 [B, H, N, d]; ``spread`` scales Q (large logits), and ``rising``
    makes later keys score higher for every query, so the running max grows tile after tile."""
    shape = (p.B, p.H, p.N, p.d)
    q = rng.standard_normal(shape) * getattr(p, "spread", 1.0)
    k = rng.standard_normal(shape)
    v = rng.standard_normal(shape)
    if getattr(p, "rising", False):
        q[..., 0] = np.abs(q[..., 0]) + 1.0
        k[..., 0] += np.linspace(0.0, 6.0, p.N)
    return dict(Q=q.astype(F32), K=k.astype(F32), V=v.astype(F32))


def scale_of(p):
    return F32(getattr(p, "scale", 1.0 / np.sqrt(p.d)))


def forward_with_mask(x, scale, mask):
    """(O, L) of attention under an arbitrary boolean mask [B or 1, 1, N, N] (True = keep)."""
    return ref.finalize_state(ref.partial_state(x["Q"], x["K"], x["V"], scale=scale, mask=mask))


def tiled_forward(x, scale, bc, *, rescale_acc=True, rescale_l=True, tiles=None):
    """FlashAttention's loop over key tiles of ``bc`` keys in float64, with switches that
    reproduce the classic bugs: forgetting to rescale the accumulator or the running sum
    when a later tile raises the max, or processing only the first ``tiles`` tiles."""
    q, k, v = (np.asarray(x[n], np.float64) for n in ("Q", "K", "V"))
    n = k.shape[-2]
    m = np.full(q.shape[:-1], -np.inf)
    ell = np.zeros(q.shape[:-1])
    acc = np.zeros(q.shape)
    for t, start in enumerate(range(0, n, bc)):
        if tiles is not None and t >= tiles:
            break
        m_t, l_t, acc_t = ref.partial_state(q, k[..., start:start + bc, :], v[..., start:start + bc, :], scale=scale)
        m_new = np.maximum(m, m_t)
        alpha, beta = np.exp(m - m_new), np.exp(m_t - m_new)
        ell = (alpha if rescale_l else 1.0) * ell + beta * l_t
        acc = (alpha[..., None] if rescale_acc else 1.0) * acc + beta[..., None] * acc_t
        m = m_new
    return ref.finalize_state((m, ell, acc))


def forward_mistakes(Mistake, bc):
    """Named diagnoses every forward exercise shares (its key tile is ``bc`` keys wide)."""

    def as_dict(ol):
        return dict(O=ol[0], L=ol[1])

    def correct(p, x, scale=None):
        return ref.attention_forward(x["Q"], x["K"], x["V"], scale=float(scale_of(p)) if scale is None else scale)

    return [
        Mistake("missing rescale of the output accumulator",
                f"when tile j raises a row's max from m_old to m_new, the accumulated output must be multiplied by "
                f"exp(m_old - m_new) before adding the new tile's P V (key tiles here are {bc} wide).",
                lambda p, x: as_dict(tiled_forward(x, float(scale_of(p)), bc, rescale_acc=False)) if p.N > bc else None),
        Mistake("missing rescale of the running sum",
                "when the max grows, l must be multiplied by exp(m_old - m_new) before adding the new tile's row sum.",
                lambda p, x: as_dict(tiled_forward(x, float(scale_of(p)), bc, rescale_l=False)) if p.N > bc else None),
        Mistake("only the first key tile processed", "loop over all ceil_div(N, BC) key tiles.",
                lambda p, x: as_dict(tiled_forward(x, float(scale_of(p)), bc, tiles=1)) if p.N > bc else None),
        Mistake("L in base 2", "L is the natural-log logsumexp: L = m + logf(l), not log2f (use logf, or multiply by ln 2).",
                lambda p, x: dict(L=correct(p, x)[1] * np.log2(np.e))),
        Mistake("L without the max", "L = m + log(l): the running sum l is measured relative to the max m.",
                lambda p, x: dict(L=correct(p, x)[1] - ref.partial_state(x["Q"], x["K"], x["V"], scale=float(scale_of(p)))[0])),
        Mistake("scale never applied", "scores are scale * (q . k); multiply once.",
                lambda p, x: as_dict(correct(p, x, scale=1.0))),
        Mistake("scale applied twice", "scores are scale * (q . k); multiply once.",
                lambda p, x: as_dict(correct(p, x, scale=float(scale_of(p)) ** 2))),
    ]


OUTPUTS = dict(O=lambda p: ((p.B, p.H, p.N, p.d), F32), L=lambda p: ((p.B, p.H, p.N), F32))


# --- more forward mistakes (added for 04_flash_forward; other modules may use them too) ---------


def log2_l_mistake(Mistake):
    """``L = m + log2f(l)``: only the log of the sum is in base 2 (the max m stays natural).
    (``forward_mistakes`` recognises the all-base-2 variant, ``L * log2(e)``.)"""

    def wrong(p, x):
        m = ref.partial_state(x["Q"], x["K"], x["V"], scale=float(scale_of(p)))[0]
        lse = ref.attention_forward(x["Q"], x["K"], x["V"], scale=float(scale_of(p)))[1]
        return dict(L=m + (lse - m) / np.log(2.0))

    return Mistake("L in base 2", "L is the natural-log logsumexp: L = m + logf(l), not m + log2f(l).", wrong)


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

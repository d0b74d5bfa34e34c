"""Float64 NumPy references for every exercise of the course.

Each student kernel is compared with one of these functions. They are written to be read:
one idea per function, the maths in the docstring, NumPy only, float64 throughout.

Notation (the same as in the course notes)
------------------------------------------
* ``Q, K, V ∈ ℝ^{S×d}`` for one head; arrays carry leading axes ``[B, H, S, d]``
  (batch, head, sequence, head dimension). Queries and keys may have different lengths
  ``S_q`` and ``S_k``.
* ``scale`` defaults to ``1/√d``. Scores ``S = scale·QKᵀ``, probabilities ``P = softmax(S)``
  (row by row), output ``O = PV``.
* Online softmax keeps, per row, a running max ``m`` and a running sum ``ℓ = Σ_j e^{S_j − m}``.
* ``L = m + log ℓ = log Σ_j e^{S_j}`` is the row's logsumexp (natural log), saved by the
  forward pass so that the backward pass can rebuild ``P = e^{S − L}`` without the softmax.
* Kernels work on tiles of ``B_r`` query rows by ``B_c`` key columns.

Masking
-------
A mask is boolean, ``True`` = keep. A masked score is ``−∞``, so its probability is 0.
A row whose keys are *all* masked has no softmax at all; by convention its output is 0 and
its logsumexp is ``−∞``, and it contributes nothing to any gradient. No function here ever
returns NaN for such a row: wherever a row max ``m`` could be ``−∞`` we subtract
``_finite_or_zero(m)`` instead, the same trick the kernels use (``e^{−∞ − 0} = 0``,
whereas ``e^{−∞ − (−∞)}`` is NaN).
"""
from __future__ import annotations

import numpy as np

__all__ = [
    "matmul",
    "scaled_scores",
    "softmax_rows",
    "online_softmax_states",
    "online_softmax",
    "partial_state",
    "merge_states",
    "finalize_state",
    "attention_mask",
    "attention_naive",
    "attention_forward",
    "backward_preprocess",
    "backward_intermediates",
    "attention_backward",
]


# ---------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------

def _f64(x):
    """``x`` as a float64 NumPy array (no copy when it already is one)."""
    return np.asarray(x, dtype=np.float64)


def _default_scale(d, scale):
    """The softmax scale: ``scale`` if given, else ``1/√d``."""
    return 1.0 / np.sqrt(d) if scale is None else float(scale)


def _finite_or_zero(m):
    """``m`` with every ``−∞`` replaced by 0: the value to subtract before ``exp``.

    When a row max is ``−∞`` every entry of the row is ``−∞`` too, and ``e^{−∞ − 0} = 0``
    gives the empty row we want instead of the NaN of ``e^{−∞ − (−∞)}``.
    """
    return np.where(np.isneginf(m), 0.0, m)


def _row_max(s):
    """``max_j s[..., j]``, ``−∞`` for an empty or fully masked row."""
    return np.max(s, axis=-1, initial=-np.inf)


def _as_heads(*arrays):
    """View 2-D ``[S, d]`` arrays as ``[1, 1, S, d]``; return the arrays and whether we did.

    Attention functions accept either one head ``[S, d]`` or a batch ``[B, H, S, d]``.
    """
    ndims = {a.ndim for a in arrays}
    if ndims == {2}:
        return [a[np.newaxis, np.newaxis] for a in arrays], True
    if ndims == {4}:
        return list(arrays), False
    raise ValueError(
        f"expected arrays of shape [S, d] or [B, H, S, d], got shapes {[a.shape for a in arrays]}"
    )


def _as_rows(x, single_head):
    """Undo ``_as_heads`` on a result: drop the leading ``[1, 1]`` for single-head inputs."""
    return x[0, 0] if single_head else x


# ---------------------------------------------------------------------------------------------
# Building blocks: matmul, scores, softmax
# ---------------------------------------------------------------------------------------------

def matmul(a, b):
    """``C = AB`` for 2-D ``A ∈ ℝ^{M×K}``, ``B ∈ ℝ^{K×N}``, in float64."""
    a, b = _f64(a), _f64(b)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul needs [M, K] @ [K, N], got {a.shape} @ {b.shape}")
    return a @ b


def scaled_scores(q, k, scale=None):
    """Attention scores ``S = scale·QKᵀ``, shape ``[..., S_q, S_k]``.

    ``q`` is ``[..., S_q, d]`` and ``k`` is ``[..., S_k, d]`` with the same leading axes (or
    axes that broadcast). ``scale`` defaults to ``1/√d``.
    """
    q, k = _f64(q), _f64(k)
    scale = _default_scale(q.shape[-1], scale)
    return scale * (q @ np.swapaxes(k, -1, -2))


def softmax_rows(s):
    """Row softmax over the last axis, computed the safe way.

    ``softmax(s)_j = e^{s_j − m} / Σ_t e^{s_t − m}`` with ``m = max_t s_t``. Subtracting ``m``
    changes nothing mathematically but keeps every exponent ≤ 0, so nothing overflows.
    A row that is entirely ``−∞`` (fully masked) gives all zeros, not NaN.
    """
    s = _f64(s)
    m = _row_max(s)[..., np.newaxis]
    e = np.exp(s - _finite_or_zero(m))
    total = e.sum(axis=-1, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


def _logsumexp_rows(s):
    """``L = log Σ_j e^{s_j} = m + log Σ_j e^{s_j − m}`` over the last axis; ``−∞`` for empty rows."""
    m = _finite_or_zero(_row_max(s))
    total = np.exp(s - m[..., np.newaxis]).sum(axis=-1)
    log_total = np.log(total, out=np.full_like(total, -np.inf), where=total > 0)
    return m + log_total


# ---------------------------------------------------------------------------------------------
# Online softmax: one block of columns at a time
# ---------------------------------------------------------------------------------------------

def online_softmax_states(x, block):
    """The running states ``(m, ℓ)`` of the online softmax, one per block of columns.

    ``x`` is 2-D ``[rows, N]``; its columns are read ``block`` at a time. Starting from
    ``m = −∞, ℓ = 0``, each block ``x_blk`` updates every row as

        m_new = max(m, max_j x_blk[j])
        ℓ_new = ℓ·e^{m − m_new} + Σ_j e^{x_blk[j] − m_new}

    The factor ``e^{m − m_new}`` rescales the old sum, which was taken relative to the old max.
    Returns a list of ``ceil(N / block)`` pairs ``(m, ℓ)``, each of shape ``[rows]``; the last
    one is ``(max_j x_j, Σ_j e^{x_j − max})``.
    """
    x = _f64(x)
    if x.ndim != 2:
        raise ValueError(f"online_softmax_states expects a 2-D array, got shape {x.shape}")
    if block < 1:
        raise ValueError(f"block must be at least 1, got {block}")
    m = np.full(x.shape[0], -np.inf)
    ell = np.zeros(x.shape[0])
    states = []
    for start in range(0, x.shape[1], block):
        blk = x[:, start:start + block]
        m_new = np.maximum(m, _row_max(blk))
        shift = _finite_or_zero(m_new)
        ell = ell * np.exp(m - shift) + np.exp(blk - shift[:, np.newaxis]).sum(axis=1)
        m = m_new
        states.append((m.copy(), ell.copy()))
    return states


def online_softmax(x, block):
    """Row softmax of 2-D ``x`` using the online algorithm; equal to ``softmax_rows(x)``.

    Pass 1 walks the blocks once to get the final ``(m, ℓ)`` of every row
    (``online_softmax_states``); pass 2 writes each block as ``e^{x − m} / ℓ``. No value is
    ever exponentiated relative to anything but a row max, so large logits are safe.
    """
    x = _f64(x)
    states = online_softmax_states(x, block)
    if not states:  # no columns at all
        return np.zeros_like(x)
    m, ell = states[-1]
    out = np.zeros_like(x)
    for start in range(0, x.shape[1], block):
        blk = x[:, start:start + block]
        e = np.exp(blk - _finite_or_zero(m)[:, np.newaxis])
        out[:, start:start + block] = np.divide(
            e, ell[:, np.newaxis], out=np.zeros_like(e), where=ell[:, np.newaxis] > 0
        )
    return out


# ---------------------------------------------------------------------------------------------
# Partial attention states: what one tile of keys contributes, and how tiles combine
# ---------------------------------------------------------------------------------------------

def partial_state(q, k, v, scale=None, mask=None):
    """The unnormalised attention state ``(m, ℓ, acc)`` of queries ``q`` over one key set.

    With ``S = scale·QKᵀ`` restricted to these keys (masked entries set to ``−∞``):

        m   = rowmax(S)              shape [..., S_q]
        ℓ   = rowsum(e^{S − m})      shape [..., S_q]
        acc = e^{S − m} V            shape [..., S_q, d]   (not yet divided by ℓ)

    ``q`` is ``[..., S_q, d]``; ``k``, ``v`` are ``[..., S_k, d]`` (any leading axes, ``S_k``
    may be 0). ``mask`` is optional, boolean (True = keep), broadcastable to ``[..., S_q, S_k]``.
    An empty or fully masked key set gives ``m = −∞, ℓ = 0, acc = 0``: the identity of
    ``merge_states``.
    """
    q, k, v = _f64(q), _f64(k), _f64(v)
    s = scaled_scores(q, k, scale)
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    m = _row_max(s)
    p = np.exp(s - _finite_or_zero(m)[..., np.newaxis])
    return m, p.sum(axis=-1), p @ v


def merge_states(a, b):
    """Combine the states ``(m, ℓ, acc)`` of two disjoint key sets into that of their union.

    Both states are rescaled to the common max ``m_new = max(m_a, m_b)``:

        α = e^{m_a − m_new},  β = e^{m_b − m_new}
        ℓ_new   = α·ℓ_a + β·ℓ_b
        acc_new = α·acc_a + β·acc_b

    This is the inner step of FlashAttention (a = what the row has seen so far, b = the next
    ``B_c`` keys). The result does not depend on the order or grouping of merges. A side with
    ``m = −∞`` (no visible keys) gets weight 0; if both sides are empty the result is empty.
    """
    m_a, l_a, acc_a = (_f64(x) for x in a)
    m_b, l_b, acc_b = (_f64(x) for x in b)
    m_new = np.maximum(m_a, m_b)
    shift = _finite_or_zero(m_new)
    alpha = np.exp(m_a - shift)
    beta = np.exp(m_b - shift)
    l_new = alpha * l_a + beta * l_b
    acc_new = alpha[..., np.newaxis] * acc_a + beta[..., np.newaxis] * acc_b
    return m_new, l_new, acc_new


def finalize_state(state):
    """Turn a state ``(m, ℓ, acc)`` into the output and the logsumexp: ``(O, L)``.

        O = acc / ℓ,   L = m + log ℓ

    For a row with no visible key (``ℓ = 0``): ``O = 0`` and ``L = −∞``.
    """
    m, ell, acc = (_f64(x) for x in state)
    has_keys = ell > 0
    safe_ell = np.where(has_keys, ell, 1.0)
    o = np.where(has_keys[..., np.newaxis], acc / safe_ell[..., np.newaxis], 0.0)
    lse = np.where(has_keys, m + np.log(safe_ell), -np.inf)
    return o, lse


# ---------------------------------------------------------------------------------------------
# Masks
# ---------------------------------------------------------------------------------------------

def attention_mask(sq, sk, causal=False, key_lengths=None, batch=1):
    """Boolean mask ``[B, 1, S_q, S_k]`` (True = query i may attend to key j).

    * ``causal``: keep ``j ≤ i``. The diagonal starts at the top-left corner, as in
      ``torch.nn.functional.scaled_dot_product_attention(is_causal=True)``. The course uses
      ``S_q = S_k``; when they differ the rule is still ``j ≤ i`` counted from index 0, so
      with ``S_q > S_k`` the rows ``i ≥ S_k`` see every key, and with ``S_q < S_k`` the keys
      ``j ≥ S_q`` are seen by no row.
    * ``key_lengths`` (``[B]`` ints, each in ``0..S_k``): for batch entry b, keys
      ``j ≥ key_lengths[b]`` are padding and are masked for every query and every head.
      A length of 0 masks the whole entry.

    The head axis has size 1 and broadcasts over ``H``.
    """
    i = np.arange(sq)[:, np.newaxis]
    j = np.arange(sk)[np.newaxis, :]
    keep = np.ones((sq, sk), dtype=bool)
    if causal:
        keep &= j <= i
    keep = np.broadcast_to(keep, (batch, 1, sq, sk))
    if key_lengths is not None:
        lengths = np.asarray(key_lengths).reshape(-1)
        if lengths.shape != (batch,):
            raise ValueError(f"key_lengths must have one entry per batch ({batch}), got {lengths.shape}")
        if np.any(lengths < 0) or np.any(lengths > sk):
            raise ValueError(f"key_lengths must lie in 0..{sk}, got {lengths.tolist()}")
        keep = keep & (j < lengths[:, np.newaxis, np.newaxis, np.newaxis])
    return np.array(keep)


def _masked_scores(q, k, causal, scale, key_lengths):
    """``S = scale·QKᵀ`` on ``[B, H, S_q, S_k]`` with masked entries set to ``−∞``."""
    mask = attention_mask(q.shape[2], k.shape[2], causal, key_lengths, q.shape[0])
    return np.where(mask, scaled_scores(q, k, scale), -np.inf)


def _probabilities_from_lse(s, lse):
    """``P = e^{S − L}`` from scores and the saved row logsumexp; 0 on fully masked rows."""
    return np.exp(s - _finite_or_zero(lse)[..., np.newaxis])


# ---------------------------------------------------------------------------------------------
# Attention forward
# ---------------------------------------------------------------------------------------------

def attention_naive(q, k, v, causal=False, scale=None, key_lengths=None):
    """Attention the direct way: build all of ``S`` and ``P``, then ``O = PV``.

        S = scale·QKᵀ (masked entries −∞),   P = softmax_rows(S),   O = PV

    Shapes: ``q`` ``[B, H, S_q, d]``, ``k``/``v`` ``[B, H, S_k, d]`` (or 2-D ``[S, d]``).
    Returns ``O`` with the shape of ``q``. Memory is ``O(S_q·S_k)`` per head: this is what
    FlashAttention avoids.
    """
    (q, k, v), single = _as_heads(_f64(q), _f64(k), _f64(v))
    s = _masked_scores(q, k, causal, scale, key_lengths)
    return _as_rows(softmax_rows(s) @ v, single)


def attention_forward(q, k, v, causal=False, scale=None, key_lengths=None):
    """Attention output and row logsumexp: ``(O, L)``, as a FlashAttention forward returns them.

        S = scale·QKᵀ (masked entries −∞)
        L = log Σ_j e^{S_ij}          (natural log, one value per query row)
        P = e^{S − L}                 (= softmax(S), since e^L is the row's normaliser)
        O = PV

    Shapes: ``q`` ``[B, H, S_q, d]``, ``k``/``v`` ``[B, H, S_k, d]``; ``O`` ``[B, H, S_q, d]``,
    ``L`` ``[B, H, S_q]``. 2-D inputs ``[S, d]`` give ``O`` ``[S_q, d]`` and ``L`` ``[S_q]``.
    ``causal`` and ``key_lengths`` are described in ``attention_mask``. A fully masked row
    gives ``O = 0`` and ``L = −∞``.
    """
    (q, k, v), single = _as_heads(_f64(q), _f64(k), _f64(v))
    s = _masked_scores(q, k, causal, scale, key_lengths)
    lse = _logsumexp_rows(s)
    o = _probabilities_from_lse(s, lse) @ v
    return _as_rows(o, single), _as_rows(lse, single)


# ---------------------------------------------------------------------------------------------
# Attention backward
# ---------------------------------------------------------------------------------------------

def backward_preprocess(o, do):
    """``D = rowsum(dO ∘ O)``, one number per query row: shape ``O.shape[:-1]``.

    ``D_i`` equals ``Σ_j P_ij dP_ij`` (because ``O = PV`` and ``dP = dO Vᵀ``), which is the term
    the softmax backward needs, but it costs only ``O(d)`` per row instead of ``O(S_k)``.
    """
    return np.sum(_f64(do) * _f64(o), axis=-1)


def _backward_inputs(q, k, v, o, lse, do):
    """Cast the backward inputs to float64 ``[B, H, ...]`` arrays (2-D inputs get ``[1, 1]``)."""
    (q, k, v, o, do), single = _as_heads(_f64(q), _f64(k), _f64(v), _f64(o), _f64(do))
    lse = _f64(lse)
    if single:
        lse = lse[np.newaxis, np.newaxis]
    return (q, k, v, o, lse, do), single


def _backward_matrices(q, k, v, o, lse, do, causal, scale, key_lengths):
    """``P, dP, dS, D`` for float64 ``[B, H, ...]`` inputs (see ``backward_intermediates``)."""
    s = _masked_scores(q, k, causal, scale, key_lengths)
    p = _probabilities_from_lse(s, lse)
    d_rows = backward_preprocess(o, do)
    dp = do @ np.swapaxes(v, -1, -2)
    ds = p * (dp - d_rows[..., np.newaxis])
    return {"P": p, "dP": dp, "dS": ds, "D": d_rows}


def backward_intermediates(q, k, v, o, lse, do, causal=False, scale=None, key_lengths=None):
    """The matrices of the attention backward pass, rebuilt from the saved logsumexp ``L``.

        P  = e^{S − L}              (S = scale·QKᵀ, masked entries −∞, so P = 0 there)
        D  = rowsum(dO ∘ O)
        dP = dO Vᵀ                  (computed for every entry, masked ones included)
        dS = P ∘ (dP − D)           (D broadcast along each row; 0 wherever P = 0)

    Returns a dict with keys ``"P"``, ``"dP"``, ``"dS"`` (each ``[B, H, S_q, S_k]``) and
    ``"D"`` (``[B, H, S_q]``); for 2-D inputs the two leading axes are dropped.
    """
    arrays, single = _backward_inputs(q, k, v, o, lse, do)
    parts = _backward_matrices(*arrays, causal, scale, key_lengths)
    return {name: _as_rows(x, single) for name, x in parts.items()}


def attention_backward(q, k, v, o, lse, do, causal=False, scale=None, key_lengths=None):
    """Gradients ``(dQ, dK, dV)`` of attention, given ``O``, ``L`` from the forward and ``dO``.

    Computed the FlashAttention way, never differentiating through a softmax:

        P  = e^{S − L},   D = rowsum(dO ∘ O)
        dV = Pᵀ dO
        dP = dO Vᵀ,       dS = P ∘ (dP − D)
        dQ = scale · dS K
        dK = scale · dSᵀ Q

    Each gradient has the shape of its input. Fully masked query rows have ``P = 0`` and
    contribute nothing; masked (padding) keys get ``dK = dV = 0``.
    """
    arrays, single = _backward_inputs(q, k, v, o, lse, do)
    q, k, v, o, lse, do = arrays
    scale = _default_scale(q.shape[-1], scale)
    parts = _backward_matrices(q, k, v, o, lse, do, causal, scale, key_lengths)
    dv = np.swapaxes(parts["P"], -1, -2) @ do
    dq = scale * (parts["dS"] @ k)
    dk = scale * (np.swapaxes(parts["dS"], -1, -2) @ q)
    return _as_rows(dq, single), _as_rows(dk, single), _as_rows(dv, single)

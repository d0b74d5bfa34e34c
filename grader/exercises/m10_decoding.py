"""10_decoding: attention for LLM decoding, a few queries per head against a long K/V cache, with
the keys split over many blocks (split-KV, "flash decoding"): each block writes the normalised
result of its chunk of keys and its logsumexp, and a second kernel merges the chunks with
module 03's rule. Then the same split for a forward with many queries (splitk_fwd, at the end of the file), whose
partial results the same merge kernel combines.

Shapes: Q [B, H, n_q, d], K and V [B, H, N, d] (N keys allocated, lengths[b] of them valid), the
partial results O_part [B, H, splits, n_q, d] and L_part [B, H, splits, n_q], the output
O [B, H, n_q, d] and L [B, H, n_q]. Split s of a head owns keys [s * chunk, min((s + 1) * chunk,
lengths[b])) with chunk = ceil_div(N, splits).

The named mistakes simulate, in float64, what a kernel computes with the wrong chunk bounds,
the wrong weights or the wrong guards, so a failing check can say which. Those inside a block of
decode_split (a reduction across slots, the order of the queries in a lane's registers, the slots' merge, a
missing -inf guard, the query groups) follow the notebook's layout: SLOTS slots of d / 8 lanes, slot r taking the
keys start + r, start + r + SLOTS, ..., groups of QG = 4 queries walked as G = 1, 2 or 4, lane t of a slot owning
query t / (d / 8 / G) of its group; a kernel laid out otherwise is judged by the other checks only.
"""
import functools
from types import SimpleNamespace

import numpy as np

from .. import reference as ref
from ..device import H100_SXM, block_limits
from ..exercise_rows import Mistake, case, exercise, hidden
from ..launch import ceil_div
from .shared import K_MATRICES, Q_MATRICES, V_MATRICES, matrices_crossed, max_from_zero, score_sizes

MODULE = "10_decoding"
F16, F32 = np.float16, np.float32
SPLIT_THREADS = 128  # decode_split: 4 warps
QG = 4  # decode_split's queries per walk over the chunk (the notebook's layout)
LOG2E, LN2 = float(np.log2(np.e)), float(np.log(2.0))
MERGE_THREADS = 128  # decode_merge
H100_HBM_TBPS = H100_SXM.hbm_tbps  # the notebook's name for it


def decode_bytes(B: int, H: int, n_q: int, N: int, d: int) -> int:
    """The bytes a decode step must move in fp16: Q, K and V read once, O written once."""
    return 2 * B * H * (2 * n_q + 2 * N) * d


def choose_splits(B: int, H: int, N: int, n_q: int = 1, sms: int = H100_SXM.sms, blocks_per_sm: int = 32,
                  min_chunk: int = 4096) -> int:
    """The host's choice of ``splits`` for a decode launch: about ``blocks_per_sm`` blocks
    (B * H * splits) per SM, many waves of the blocks an SM can hold at once, so that the last,
    partly filled wave is a small part of the time; but no chunk with fewer than ``min_chunk`` keys,
    over which each block's fixed work (loading q, merging its slots' states, writing its partial
    result) is spread. At least 1. ``n_q`` does not change the choice: a block's fixed work grows with
    the number of queries as its work per key does, and at n_q = 4 chunks of 4096 keys beat chunks of
    1024. (The constants come from the H100 sweeps of benchmarks/decode.py.)"""
    wanted = ceil_div(blocks_per_sm * sms, B * H)
    return max(1, min(wanted, ceil_div(N, min_chunk)))


# --------------------------------------------------------------------------- inputs


def _draw(p, rng):
    """Q [B, H, n_q, d], K, V [B, H, N, d] in float64. ``spread`` scales Q (large
    logits). Legal extremes move every query's score for a key by a chosen offset (feature 0:
    q[..., 0] = 1 and k[..., j, 0] = offset / scale): ``negative=X`` puts every score near -X
    (X > 87: exp(s) underflows in float32), ``late_peak=X`` lifts the last valid key of each batch
    entry X above the rest (the max arrives in the last step of the last nonempty split)."""
    q = rng.standard_normal((p.B, p.H, p.n_q, p.d)) * getattr(p, "spread", 1.0)
    k = rng.standard_normal((p.B, p.H, p.N, p.d))
    v = rng.standard_normal((p.B, p.H, p.N, p.d))
    offset = np.full((p.B, p.N), -getattr(p, "negative", 0.0))
    for b, length in enumerate(p.lengths):
        if length:
            offset[b, length - 1] += getattr(p, "late_peak", 0.0)
    if offset.any():
        q[..., 0] = 1.0
        k[..., 0] = offset[:, None, :] / float(scale_of(p))
    return q, k, v


def scale_of(p):
    return F32(getattr(p, "scale", 1.0 / np.sqrt(p.d)))


def _split_inputs(p, rng):
    q, k, v = _draw(p, rng)
    return dict(Q=q.astype(F16), K=k.astype(F16), V=v.astype(F16), lengths=np.asarray(p.lengths, np.int32))


# --------------------------------------------------------------------------- the partial results


def _keep(p, lengths=None, chunk=None, end_shift=0):
    """[B, H or 1, splits, N] boolean: split s of head (b, h) sees key j. ``lengths`` [B] or [B, H]
    (default: the case's), ``chunk`` (default ceil_div(N, splits)) and ``end_shift`` (keys added to
    or taken from the end of every chunk) reproduce wrong bounds."""
    chunk = ceil_div(p.N, p.splits) if chunk is None else chunk
    lengths = np.asarray(p.lengths if lengths is None else lengths)
    lengths = lengths.reshape(lengths.shape + (1,) * (2 - lengths.ndim))  # [B, 1] or [B, H]
    start = np.arange(p.splits) * chunk
    end = np.minimum(start + chunk + end_shift, lengths[..., None])  # [B, H or 1, splits]
    j = np.arange(p.N)
    return (j >= start[:, None]) & (j < end[..., None])


def _per_split(x):
    """Q, K, V as float64 with a splits axis (size 1) before the rows, so one mask covers every split."""
    return tuple(np.asarray(x[n], np.float64)[:, :, None] for n in ("Q", "K", "V"))


def partials(p, x, keep=None, scale=None):
    """(O_part, L_part) in float64: each split's softmax-weighted average of V over its keys, and
    their logsumexp; an empty split gives O = 0 and L = -inf (ref.finalize_state's convention)."""
    keep = _keep(p) if keep is None else keep
    q, k, v = _per_split(x)
    state = ref.partial_state(q, k, v, scale=float(scale_of(p)) if scale is None else scale, mask=keep[..., None, :])
    return ref.finalize_state(state)


def _split_ref(p, x):
    o, lse = partials(p, x)
    return dict(O_part=o, L_part=lse)


def _split_magnitude(p, x):
    """{O_part, L_part}: the size of the terms behind each partial result, per split as for a forward
    (grader/exercises/shared.py forward_magnitude): (1 + R) * sum_j P_j |V_jc| and |L| + R, R the
    largest score size among the split's keys."""
    q, k, v = _per_split(x)
    keep = _keep(p)[..., None, :]
    scale = float(scale_of(p))
    _, r = score_sizes(q, k, scale, keep)
    probs = ref.softmax_rows(np.where(keep, ref.scaled_scores(q, k, scale), -np.inf))
    lse = partials(p, x)[1]
    return dict(O_part=(1.0 + r)[..., None] * (probs @ np.abs(v)),
                L_part=np.where(np.isfinite(lse), np.abs(lse), 0.0) + r)


# --------------------------------------------------------------------------- decode_split's mistakes


def _as_split(ol):
    return dict(O_part=ol[0], L_part=ol[1])


def _when(condition, make):
    return make() if condition else None


def _lengths_by_head(p):
    """lengths read at the head index (blockIdx.y) instead of the batch entry (blockIdx.z)."""
    return np.broadcast_to(np.asarray(p.lengths)[None, :p.H], (p.B, p.H)) if p.H <= p.B else None


def _chunk_max(p, x):
    """The natural-log max score of each split (0 for an empty one)."""
    q, k, _ = _per_split(x)
    s = np.where(_keep(p)[..., None, :], ref.scaled_scores(q, k, float(scale_of(p))), -np.inf)
    m = s.max(axis=-1)
    return np.where(np.isfinite(m), m, 0.0)


def _empty_split_nan(p, x):
    o, _ = partials(p, x)
    empty = ~_keep(p).any(axis=-1)  # [B, H or 1, splits]
    if not empty.any():
        return None
    return dict(O_part=np.where(empty[..., None, None], np.nan, o))


def _max_from_zero(p, x):
    if not getattr(p, "negative", 0):
        return None
    q, k, v = _per_split(x)
    return _as_split(max_from_zero(dict(Q=q, K=k, V=v), float(scale_of(p)), _keep(p)[..., None, :]))


def _slots(p):
    """Slots of decode_split's layout: LANES_PER_KEY = d / 8 lanes read one key row, so 128 threads make
    16 slots (d = 64) or 8 (d = 128); slot r of split s takes the keys start + r, start + r + SLOTS, ..."""
    return SPLIT_THREADS // (p.d // 8)


def _split_scores(p, x, keep=None, scale=None):
    """[B, H, splits, n_q, N]: the natural-log scores of each split's keys, -inf for the keys it does not own."""
    q, k, _ = _per_split(x)
    keep = _keep(p) if keep is None else keep
    s = ref.scaled_scores(q, k, float(scale_of(p)) if scale is None else scale)
    return np.where(keep[..., None, :], s, -np.inf)


def _state_of(s, v):
    """Module 03's state (m, l, acc) of scores s [..., n_q, N] (-inf: not attended) over the rows of v."""
    m = s.max(axis=-1)
    e = np.exp(s - np.where(np.isfinite(m), m, 0.0)[..., None])
    return m, e.sum(axis=-1), e @ v


def _from_scores(x, s):
    return _as_split(ref.finalize_state(_state_of(s, _per_split(x)[2])))


def _transposed_partials(p, x):
    """O_part and L_part written [n_q][splits] per head: query i of split s at row (head * n_q + i) * splits + s."""
    if p.n_q == 1 or p.splits == 1:
        return None
    o, lse = partials(p, x)
    return dict(O_part=np.swapaxes(o, 2, 3).reshape(o.shape), L_part=np.swapaxes(lse, 2, 3).reshape(lse.shape))


def _q_rows_from_zero(p, x):
    """Query q0 + i of every group of QG computed with Q row i (q0 forgotten in the load)."""
    if p.n_q <= QG:
        return None
    return _as_split(partials(p, dict(x, Q=np.asarray(x["Q"])[:, :, np.arange(p.n_q) % QG])))


def _q_in_query_order(p, x):
    """walk<G>'s reduce-scatter expects lane t's register j to hold query j ^ mine (mine = t / (LANES_PER_KEY / G),
    the query the lane owns, G = 1, 2 or 4 queries per group as the notebook's dispatch). With row j of the group
    in register j instead, the lanes that own query a add up, on the d / G columns of lane group c (the lanes that
    own query c), the partial dot products of query a ^ c: query a is scored with the row whose columns of group
    c are those of query a ^ c (zeros past the group's last query). None when every group has one query."""
    if p.n_q == 1:
        return None
    q = np.asarray(x["Q"], np.float64)
    mixed = np.zeros_like(q)
    for q0 in range(0, p.n_q, QG):
        nq = min(QG, p.n_q - q0)
        g = 1 if nq == 1 else 2 if nq == 2 else QG
        width = p.d // g
        for a in range(nq):
            for c in range(g):
                if a ^ c < nq:
                    cols = slice(c * width, (c + 1) * width)
                    mixed[..., q0 + a, cols] = q[..., q0 + (a ^ c), cols]
    return _as_split(partials(p, dict(x, Q=mixed)))


def _scores_summed(group):
    """Every key's score replaced by the sum of the scores of the ``group`` keys that ``group`` neighbouring
    slots hold in one step (a shuffle reduction over group * LANES_PER_KEY lanes): keys start + group * t ..
    start + group * t + group - 1 of the split, those past its end adding 0 (their rows were loaded as zeros)."""
    def wrong(p, x):
        if group * (p.d // 8) > 32:  # more lanes than a warp has
            return None
        chunk = ceil_div(p.N, p.splits)
        s = _split_scores(p, x)
        own = np.where(np.isfinite(s), s, 0.0)
        summed = np.zeros_like(own)
        for split in range(p.splits):
            start = split * chunk
            part = own[:, :, split, :, start:start + chunk]
            n = part.shape[-1]
            if n == 0:
                continue
            pad = np.concatenate([part, np.zeros(part.shape[:-1] + (-n % group,))], axis=-1)
            sums = pad.reshape(pad.shape[:-1] + (-1, group)).sum(axis=-1)
            summed[:, :, split, :, start:start + n] = np.repeat(sums, group, axis=-1)[..., :n]
        return _from_scores(x, np.where(np.isfinite(s), summed, -np.inf))
    return wrong


def _slot_states(p, x):
    """The online-softmax state (m, l, acc) of each of the SLOTS slots of every split, in the natural log."""
    slots, chunk = _slots(p), ceil_div(p.N, p.splits)
    slot_of = (np.arange(p.N)[None, :] - np.arange(p.splits)[:, None] * chunk) % slots  # [splits, N]
    s, v = _split_scores(p, x), _per_split(x)[2]
    return [_state_of(np.where((slot_of == r)[:, None, :], s, -np.inf), v) for r in range(slots)]


def _slots_unweighted(p, x):
    """The slots' (l, acc) added up without the factors exp(m_r - m): O = sum acc_r / sum l_r, L = m + log sum l_r."""
    states = _slot_states(p, x)
    m = np.max([st[0] for st in states], axis=0)
    return _as_split(ref.finalize_state((m, sum(st[1] for st in states), sum(st[2] for st in states))))


def _slots_normalised_first(p, x):
    """Each slot's acc divided by its own l before the (weighted) slot merge divides by the merged l again;
    a slot with no key gives 0 / 0 = NaN (and an empty split O = 0)."""
    states = _slot_states(p, x)
    m = np.max([st[0] for st in states], axis=0)
    shift = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        w = [np.exp(st[0] - shift) for st in states]
        o = sum(wr[..., None] * (st[2] / st[1][..., None]) for wr, st in zip(w, states))
        l_sum = sum(wr * st[1] for wr, st in zip(w, states))
        return dict(O_part=np.where((l_sum > 0)[..., None], o / np.where(l_sum > 0, l_sum, 1.0)[..., None], 0.0))


def _short_chunks_empty(p, x):
    """Without the -inf guard in the online softmax step, a slot with no key in the first step gets
    exp2f(-inf - (-inf)) = NaN in l and acc: every split with fewer keys than SLOTS (but some) comes out as an
    empty one (O = 0, L = -inf), or NaN."""
    keep = _keep(p)
    count = keep.sum(axis=-1)
    short = (count > 0) & (count < _slots(p))
    if not short.any():
        return None
    return _as_split(partials(p, x, keep & ~short[..., None]))


SPLIT_MISTAKES = [
    Mistake("online softmax step without the -INFINITY guard",
            "a slot whose keys in a step are all past end (a chunk with fewer keys than the SLOTS slots) still has "
            "m_new = -INFINITY, and exp2f(m - m_new) = exp2f(-inf + inf) = NaN poisons its l and acc, so the whole "
            "split comes out empty (or NaN): subtract base = (m_new == -INFINITY ? 0 : m_new) instead of m_new.",
            _short_chunks_empty),
    Mistake("padding keys included",
            "keys j >= lengths[b] are padding: a split's keys end at min((s + 1) * chunk, lengths[b]), not at "
            "(s + 1) * chunk or N.",
            lambda p, x: _when(min(p.lengths) < p.N, lambda: _as_split(partials(p, x, _keep(p, lengths=[p.N] * p.B))))),
    Mistake("key length of another batch entry",
            "the batch entry is blockIdx.z (the head is blockIdx.y): read lengths[blockIdx.z].",
            lambda p, x: _when(_lengths_by_head(p) is not None and len(set(p.lengths)) > 1,
                               lambda: _as_split(partials(p, x, _keep(p, lengths=_lengths_by_head(p)))))),
    Mistake("an empty split writes NaN",
            "a split with no valid key (its chunk starts at or past lengths[b]) has l = 0: write O = 0 and "
            "L = -INFINITY for it instead of acc / l = 0 / 0 = NaN.",
            _empty_split_nan),
    Mistake("chunk end off by one: a key counted twice",
            "split s owns keys s * chunk .. (s + 1) * chunk - 1; the key (s + 1) * chunk is the first of split "
            "s + 1, so stop before it (key < end, not key <= end).",
            lambda p, x: _as_split(partials(p, x, _keep(p, end_shift=1)))),
    Mistake("chunk end off by one: the last key of each chunk dropped",
            "split s owns keys s * chunk .. (s + 1) * chunk - 1 inclusive: end = min((s + 1) * chunk, lengths[b]) "
            "and loop while key < end.",
            lambda p, x: _as_split(partials(p, x, _keep(p, end_shift=-1)))),
    Mistake("chunk size rounded down",
            "chunk = ceil_div(N, splits): with N / splits the last N % splits keys belong to no split.",
            lambda p, x: _when(p.N % p.splits, lambda: _as_split(partials(p, x, _keep(p, chunk=p.N // p.splits))))),
    Mistake("L_part in base 2",
            "L is the natural-log logsumexp: with scores kept in the log2 domain, L = (m + log2f(l)) * ln 2.",
            lambda p, x: dict(L_part=partials(p, x)[1] * np.log2(np.e))),
    Mistake("L_part without the max",
            "L = m + log(l): the running sum l is measured relative to the max m.",
            lambda p, x: dict(L_part=partials(p, x)[1] - _chunk_max(p, x))),
    Mistake("running max starts at 0",
            "initialise m = -INFINITY, not 0: when every score is below about -87, exp(s - 0) underflows to 0 "
            "for every key, so l = 0 and the split looks empty (or 0 / 0 = NaN).",
            _max_from_zero),
    Mistake("scale computed from d instead of the scale argument",
            "use the kernel's `scale` argument: the caller may pass any scale, not only 1/sqrt(d).",
            lambda p, x: _when(not np.isclose(scale_of(p), 1 / np.sqrt(p.d)),
                               lambda: _as_split(partials(p, x, scale=float(F32(1 / np.sqrt(p.d))))))),
    Mistake("scale never applied", "scores are scale * (q . k); multiply once.",
            lambda p, x: _as_split(partials(p, x, scale=1.0))),
    Mistake("scale applied twice", "scores are scale * (q . k); multiply once"
            " (at the default scale 1/sqrt(d) the same numbers come from dividing by d instead of sqrt(d)).",
            lambda p, x: _as_split(partials(p, x, scale=float(scale_of(p)) ** 2))),
    Mistake("expf on scores in the log2 domain",
            "q is multiplied by scale * log2(e), so the scores are in base 2: exponentiate them with exp2f (expf "
            "weighs key j by e^(1.44 s_j), a softmax with the wrong scale), or multiply q by the scale alone and use "
            "expf and logf throughout.",
            lambda p, x: dict(O_part=partials(p, x, scale=float(scale_of(p)) * LOG2E)[0])),
    Mistake("scores not multiplied by log2(e) before exp2f",
            "exp2f(x) is e^(x ln 2): with q multiplied by the scale alone, exp2f weighs key j by e^(0.69 s_j). "
            "Multiply q by scale * log2(e) once (then L = (m + log2f(l)) * ln 2), or use expf and logf throughout.",
            lambda p, x: _as_split(partials(p, x, scale=float(scale_of(p)) * LN2))),
    Mistake("O_part and L_part indexed [n_q][splits]",
            "the partial results of head (b, h) are laid out [splits][n_q]: query i of split s is row "
            "(head * splits + s) * n_q + i of L_part (and that row times HEAD_DIM in O_part), not "
            "(head * n_q + i) * splits + s.",
            _transposed_partials),
    Mistake("Q row i loaded instead of row q0 + i",
            f"query q0 + i of the group of {QG} that starts at q0 is row head * n_q + q0 + i of Q: loading row "
            f"head * n_q + i computes every later group with the q of queries 0 .. {QG - 1}.",
            _q_rows_from_zero),
    Mistake("q loaded in query order, not j ^ mine",
            "reduce_scatter adds the partner's register j + n to register j, which sums one query only if every lane "
            "keeps the group's queries in the order 'query j ^ mine in register j' (mine = t / (LANES_PER_KEY / G), "
            "the query lane t of the slot owns): then the partner's upper half holds this lane's lower-half queries. "
            "Load row j ^ mine of the group into q[j] (and write acc[j] to query j ^ mine); with row j in q[j] each "
            "score mixes the columns of several queries.",
            _q_in_query_order),
    *(Mistake("score reduced across slots",
              "a key's score is the sum of the partial dot products of its own slot's LANES_PER_KEY = HEAD_DIM / 8 "
              "lanes: shuffle with the offsets LANES_PER_KEY / 2, ..., 1. Offsets that reach further (16, as in "
              f"module 03's full-warp butterfly) add in the dot products of the keys the neighbouring slots hold "
              f"(here {group} keys share one score).",
              _scores_summed(group)) for group in (2, 4)),
    Mistake("slot states merged without their weights",
            "each slot's l and acc are measured against its own max m_r: multiply both by exp2f(m_r - m), m the max "
            "over the slots, before adding them up (module 03's merge); the plain sums mix terms of different scales.",
            _slots_unweighted),
    Mistake("O divided by l twice",
            "divide by l once: each slot's acc goes to shared memory unnormalised (acc, not acc / l: it is a state, "
            "merged with the weights exp2f(m_r - m) l_r), and the merged o / l_sum is the only division (a slot with "
            "no key would also give 0 / 0 = NaN).",
            _slots_normalised_first),
]


def _kv_read_once(io, p):
    """decode_split must read the K and V rows of the valid keys and nothing else, each once (the
    case has at most 4 queries per head: one walk over each chunk)."""
    needed = 2 * sum(p.lengths) * p.H * p.d * 2  # K and V, 2-byte elements
    read = io.per_array["K"][0] + io.per_array["V"][0]
    if read <= 1.05 * needed:
        return None
    return (f"your kernel read {read / needed:.2f}x the bytes of K and V that the valid keys hold ({read} bytes, "
            f"{needed} needed). Decoding is memory bound: load only keys < lengths[b] (padding rows need not be "
            "read at all, not even to be masked), and each key row once per walk over the chunk.")


def _split_cases(d):
    return [
        case("one_query", B=1, H=1, n_q=1, N=64, splits=2, lengths=(64,), d=d, seed=1),
        case("several_queries", B=1, H=2, n_q=6, N=100, splits=3, lengths=(100,), d=d, seed=2),
        case("sixteen_queries", B=1, H=1, n_q=16, N=40, splits=2, lengths=(40,), d=d, seed=3),
        case("long_chunks", B=1, H=1, n_q=2, N=300, splits=2, lengths=(300,), d=d, seed=4),
        case("more_splits_than_keys", B=1, H=2, n_q=2, N=10, splits=16, lengths=(10,), d=d, seed=5),
        case("lengths_0_1_full", B=3, H=2, n_q=3, N=70, splits=4, lengths=(70, 1, 0), d=d, seed=6),
        case("padding_mid_chunk", B=2, H=1, n_q=1, N=128, splits=4, lengths=(50, 97), d=d, seed=7),
        case("large_logits", B=1, H=1, n_q=4, N=90, splits=3, lengths=(90,), spread=60.0, d=d, seed=8),
        case("max_in_last_split", B=1, H=1, n_q=2, N=300, splits=2, lengths=(300,), late_peak=30.0, d=d, seed=9),
        case("scores_below_minus_87", B=1, H=1, n_q=2, N=60, splits=2, lengths=(60,), negative=150.0, d=d, seed=10),
        case("custom_scale", B=1, H=2, n_q=3, N=80, splits=3, lengths=(80,), scale=0.3, d=d, seed=11),
        hidden("sizes_odd", B=2, H=3, n_q=5, N=133, splits=5, lengths=(133, 77), d=d),
        hidden("short_and_empty", B=2, H=1, n_q=1, N=37, splits=7, lengths=(0, 37), d=d),
        hidden("long_ragged", B=1, H=2, n_q=4, N=400, splits=3, lengths=(333,), spread=3.0, d=d),
        hidden("custom_scale_peak", B=2, H=1, n_q=3, N=120, splits=4, lengths=(120, 61), scale=0.2, late_peak=40.0,
               d=d),
        hidden("sixteen_queries_padded", B=2, H=1, n_q=16, N=90, splits=3, lengths=(45, 90), d=d),
    ]


for _d in (64, 128):
    exercise(
        id=f"decode_split_d{_d}",
        hidden_sizes={"N": 32},
        module=MODULE,
        kernel="decode_split",
        signature="decode_split(const __half* Q, const __half* K, const __half* V, const int* lengths, "
        "float* O_part, float* L_part, int n_q, int N, int splits, float scale)",
        launch_shape=f"compiled with -DHEAD_DIM={_d}; grid = (splits, H, B), block = {SPLIT_THREADS}: block "
        "(s, h, b) attends all n_q queries (1..16) of head (b, h) over keys [s * chunk, min((s + 1) * chunk, "
        "lengths[b])), chunk = ceil_div(N, splits), and writes their normalised output O_part [B, H, splits, n_q, d] "
        "and natural-log logsumexp L_part [B, H, splits, n_q] (float; an empty split: O = 0, L = -INFINITY); "
        "Q [B, H, n_q, d], K and V [B, H, N, d] half, lengths [B] int; no mask among the queries. The check also "
        "counts the K and V bytes read on the emulator",
        make_inputs=_split_inputs,
        outputs=dict(O_part=lambda p: ((p.B, p.H, p.splits, p.n_q, p.d), F32),
                     L_part=lambda p: ((p.B, p.H, p.splits, p.n_q), F32)),
        reference=_split_ref,
        args=lambda p, a: (a.Q, a.K, a.V, a.lengths, a.O_part, a.L_part, np.int32(p.n_q), np.int32(p.N),
                           np.int32(p.splits), scale_of(p)),
        grid=lambda p: (p.splits, p.H, p.B),
        block=lambda p: SPLIT_THREADS,
        options=(f"-DHEAD_DIM={_d}",),
        cases=_split_cases(_d),
        magnitude=_split_magnitude,
        mistakes=SPLIT_MISTAKES,
        race_check=True,
        race_case="several_queries",  # two groups of queries: the shared states are reused
        io_check=_kv_read_once,
        io_case="padding_mid_chunk",
    )

# --------------------------------------------------------------------------- decode_merge


def _merge_inputs(p, rng):
    """The float32 partial results of decode_split for a drawn Q, K, V (exact up to the rounding to float32)."""
    q, k, v = _draw(p, rng)
    o, lse = partials(p, dict(Q=q.astype(F16), K=k.astype(F16), V=v.astype(F16)))
    return dict(O_part=o.astype(F32), L_part=lse.astype(F32))


def _split_states(x):
    """Each split's partial result as module 03's state (m, l, acc) = (L_s, 1, O_s), (-inf, 0, 0) when
    empty: O_s is its average with l measured against e^{L_s}."""
    o, lse = (np.asarray(x[n], np.float64) for n in ("O_part", "L_part"))
    return [(lse[:, :, s], np.isfinite(lse[:, :, s]).astype(np.float64), o[:, :, s]) for s in range(lse.shape[2])]


def _merge_ref(p, x):
    o, lse = ref.finalize_state(functools.reduce(ref.merge_states, _split_states(x)))
    return dict(O=o, L=lse)


def _merge_magnitude(p, x):
    """{O, L}: O's terms are w_s |O_s| (w_s = e^{L_s - L}, summing to 1); L's error scales with the largest |L_s|."""
    o, lse = (np.asarray(x[n], np.float64) for n in ("O_part", "L_part"))
    total = _merge_ref(p, x)["L"][:, :, None]  # [B, H, 1, n_q]
    w = np.exp(lse - np.where(np.isfinite(total), total, 0.0))  # 0 for an empty split
    return dict(O=(w[..., None] * np.abs(o)).sum(axis=2), L=np.where(np.isfinite(lse), np.abs(lse), 0.0).max(axis=2))


def _weighted(x, weights):
    """(O, L) from unnormalised weights [B, H, splits, n_q] of the splits (O = 0, L = -inf where they sum to 0)."""
    o = np.asarray(x["O_part"], np.float64)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        total = weights.sum(axis=2)
        out = (weights[..., None] * o).sum(axis=2) / total[..., None]
        return np.where((total > 0)[..., None], out, 0.0), np.where(total > 0, np.log(total), -np.inf)


def _float32_exp(t):
    with np.errstate(over="ignore", under="ignore"):
        return np.exp(np.asarray(t, F32)).astype(np.float64)


def _lse(x):
    return np.asarray(x["L_part"], np.float64)


def _unshifted(p, x):
    o, lse = _weighted(x, _float32_exp(_lse(x)))
    return dict(O=o, L=lse)


def _max_from_zero_merge(p, x):
    if not getattr(p, "negative", 0):
        return None
    m = np.maximum(_lse(x).max(axis=2), 0.0)
    o, lse = _weighted(x, _float32_exp(_lse(x) - m[:, :, None]))
    return dict(O=o, L=np.where(np.isfinite(lse), m + lse, -np.inf))


def _empty_entry_nan(p, x):
    empty = ~np.isfinite(_lse(x)).any(axis=2)  # [B, H, n_q]: every split empty
    if not empty.any():
        return None
    return dict(O=np.where(empty[..., None], np.nan, _merge_ref(p, x)["O"]))


def _weights_in_base(c, log2_of_l=False):
    """Weights e^(c (L_s - m)) instead of e^(L_s - m): c = ln 2 (exp2f of the natural-log difference),
    c = log2(e) (expf of the difference converted to the log2 domain); L = m + log(l) or m + log2(l)."""
    def wrong(p, x):
        if p.splits == 1:
            return None
        lse = _lse(x)
        m = lse.max(axis=2)
        shift = np.where(np.isfinite(m), m, 0.0)
        o, log_l = _weighted(x, np.exp(c * (lse - shift[:, :, None])))
        return dict(O=o, L=shift + (log_l * LOG2E if log2_of_l else log_l))
    return wrong


def _max_counted_twice(p, x):
    """Weights expf(L_s) (the max not subtracted) but L = m + logf(l): L comes out as m + L. None where some
    entry's sum of e^(L_s) overflows or underflows float: there the unshifted weights are the mistake to name."""
    lse = _lse(x)
    total = _float32_exp(lse).sum(axis=2)
    if (np.isfinite(lse).any(axis=2) & ~(np.isfinite(total) & (total > 0))).any():
        return None
    o, log_l = _weighted(x, _float32_exp(lse))
    return dict(O=o, L=lse.max(axis=2) + log_l)


def _read_transposed(p, x):
    """O_part and L_part read as [n_q][splits] per head: split s of query i at row (head * n_q + i) * splits + s."""
    if p.n_q == 1 or p.splits == 1:
        return None
    lse, o = _lse(x), np.asarray(x["O_part"], np.float64)
    B, H, S, Q = lse.shape
    return _merge_ref(p, dict(O_part=o.reshape(B, H, Q, S, -1).swapaxes(2, 3),
                              L_part=lse.reshape(B, H, Q, S).swapaxes(2, 3)))


def _l_without_max(p, x):
    lse = _merge_ref(p, x)["L"]
    m = _lse(x).max(axis=2)
    return dict(L=lse - np.where(np.isfinite(m), m, 0.0))


MERGE_MISTAKES = [
    Mistake("only the first split merged",
            "O and L must combine every split s = 0 .. splits - 1 of the head, not just split 0.",
            lambda p, x: _when(p.splits > 1, lambda: dict(O=np.asarray(x["O_part"], np.float64)[:, :, 0],
                                                          L=_lse(x)[:, :, 0]))),
    Mistake("partials averaged with equal weights",
            "split s holds e^{L_s} of the total weight: O = sum_s e^{L_s - L} O_s with L = log sum_s e^{L_s}, "
            "not the plain mean of the O_s (an empty split weighs nothing, a split with a larger L more).",
            lambda p, x: _when(p.splits > 1, lambda: dict(O=np.asarray(x["O_part"], np.float64).mean(axis=2)))),
    Mistake("weights exp(L_s) without subtracting the max",
            "e^{L_s} overflows float32 once L_s > 88.7 (inf / inf = NaN) and underflows below -103: take the max "
            "m = max_s L_s first and use e^{L_s - m}, then L = m + log(sum).",
            _unshifted),
    Mistake("running max starts at 0",
            "start the max over the splits at -INFINITY, not 0: when every L_s is below about -103, e^{L_s - 0} "
            "underflows to 0 for every split and the entry looks empty.",
            _max_from_zero_merge),
    Mistake("an entry with no keys gives NaN",
            "when every split is empty (L_s = -INFINITY: lengths[b] = 0) the max is -INFINITY too and "
            "e^{L_s - m} = e^{-inf - (-inf)} = NaN: subtract 0 instead of an infinite max and write O = 0, "
            "L = -INFINITY for the entry.",
            _empty_entry_nan),
    *(Mistake("merge weights in base 2",
              "L_part is a natural-log logsumexp: the weight of split s is expf(L_s - m) (or exp2f((L_s - m) * "
              "log2(e)), not exp2f(L_s - m)), and L = m + logf(l).",
              _weights_in_base(LN2, log2_of_l)) for log2_of_l in (True, False)),
    Mistake("merge weights expf((L_s - m) * log2(e))",
            "(L_s - m) * log2(e) is an exponent for exp2f, which gives e^(L_s - m) back; expf of it weighs split s by "
            "e^(1.44 (L_s - m)). Use expf(L_s - m), or exp2f((L_s - m) * log2(e)).",
            _weights_in_base(LOG2E)),
    Mistake("the max counted twice in L",
            "with weights expf(L_s) (the max not subtracted) the sum l is already e^L, so L = m + logf(l) adds the max "
            "once more (2 L with one split): use the weights expf(L_s - m), which also keep e^x from overflowing, and "
            "L = m + logf(l).",
            _max_counted_twice),
    Mistake("O_part and L_part read as [n_q][splits]",
            "the partial results of head (b, h) are laid out [splits][n_q]: split s of query i is row "
            "(head * splits + s) * n_q + i of L_part (and that row times HEAD_DIM in O_part), not "
            "(head * n_q + i) * splits + s.",
            _read_transposed),
    Mistake("L without the max", "L = m + log(l): the sum l of the weights e^{L_s - m} is measured relative to m.",
            _l_without_max),
]


def _merge_cases(d):
    return [
        case("one_split", B=1, H=1, n_q=1, N=32, splits=1, lengths=(32,), d=d, seed=1),
        case("two_splits", B=1, H=2, n_q=1, N=64, splits=2, lengths=(64,), d=d, seed=2),
        case("several_queries", B=1, H=1, n_q=7, N=90, splits=3, lengths=(90,), d=d, seed=3),
        case("more_splits_than_keys", B=1, H=2, n_q=2, N=10, splits=16, lengths=(10,), d=d, seed=4),
        case("lengths_0_1_full", B=3, H=2, n_q=2, N=70, splits=4, lengths=(70, 1, 0), d=d, seed=5),
        case("large_logits", B=1, H=2, n_q=3, N=80, splits=4, lengths=(80,), spread=60.0, d=d, seed=6),
        # 120 above the first split's keys: e^(L_s - L_0) overflows float, so the base must be the max of all splits
        case("max_in_last_split", B=1, H=1, n_q=2, N=120, splits=3, lengths=(120,), late_peak=120.0, d=d, seed=7),
        case("scores_below_minus_87", B=1, H=1, n_q=2, N=60, splits=3, lengths=(60,), negative=150.0, d=d, seed=8),
        hidden("sizes_odd", B=2, H=3, n_q=5, N=133, splits=5, lengths=(133, 77), d=d),
        hidden("sixteen_queries_many_splits", B=2, H=1, n_q=16, N=200, splits=9, lengths=(0, 150), spread=30.0, d=d),
        hidden("peak_custom_scale", B=1, H=2, n_q=4, N=100, splits=6, lengths=(100,), scale=0.2, late_peak=40.0,
               d=d),
    ]


for _d in (64, 128):
    exercise(
        id=f"decode_merge_d{_d}",
        hidden_sizes={"N": 32},
        module=MODULE,
        kernel="decode_merge",
        signature="decode_merge(const float* O_part, const float* L_part, __half* O, float* L, int n_q, int splits)",
        launch_shape=f"compiled with -DHEAD_DIM={_d}; grid = (H, B), block = {MERGE_THREADS}: block (h, b) merges the "
        "splits of head (b, h) for all n_q queries: O [B, H, n_q, d] half and L [B, H, n_q] float from O_part "
        "[B, H, splits, n_q, d] and L_part [B, H, splits, n_q] (float, natural-log; an empty split has "
        "L_s = -INFINITY); an entry whose splits are all empty gets O = 0 and L = -INFINITY",
        make_inputs=_merge_inputs,
        outputs=dict(O=lambda p: ((p.B, p.H, p.n_q, p.d), F16), L=lambda p: ((p.B, p.H, p.n_q), F32)),
        reference=_merge_ref,
        args=lambda p, a: (a.O_part, a.L_part, a.O, a.L, np.int32(p.n_q), np.int32(p.splits)),
        grid=lambda p: (p.H, p.B),
        block=lambda p: MERGE_THREADS,
        options=(f"-DHEAD_DIM={_d}",),
        cases=_merge_cases(_d),
        magnitude=_merge_magnitude,
        mistakes=MERGE_MISTAKES,
    )

# --------------------------------------------------------------------------- splitk_fwd: the split-K forward
#
# Many queries (S_q of them per head) against the keys split as above. A query tile of SPLITK_ROWS rows of one head is
# decode_merge's "head" with n_q = SPLITK_ROWS: block (tile, s, head) writes the partial results of the tile's rows
# over chunk s at O_part[b, h, tile, s] (rows past S_q too: their q is zero), and decode_merge launched on the grid
# (q_tiles * H, B) with n_q = SPLITK_ROWS combines them, unchanged, into O [B, H, q_tiles * SPLITK_ROWS, d].

SPLITK_ROWS = 64  # splitk_fwd: query rows per block, 16 per warp
SPLITK_THREADS = 128
SPLITK_TILE = 64  # keys per K/V tile
SPLITK_STAGES = 2


def splitk_tiles(S_q: int) -> int:
    return ceil_div(S_q, SPLITK_ROWS)


def splitk_shared_bytes(d: int) -> int:
    """The Q tile and SPLITK_STAGES buffers of (K tile, V tile), rows padded by 8 halves."""
    return (SPLITK_ROWS + 2 * SPLITK_STAGES * SPLITK_TILE) * (d + 8) * 2


def splitk_resident_blocks(d: int) -> int:
    """How many splitk_fwd blocks one H100 SM holds at once: the fewest allowed by shared memory (splitk_shared_bytes(d)
    plus the 1 KB the system keeps per block, against 228 KB), by warps (SPLITK_THREADS / 32 against 64) and by the
    32-block limit. 4 at d = 64 (46 080 bytes a block), 2 at d = 128 (87 040). Registers are not counted: at
    SPLITK_THREADS = 128 they would limit only past 128 registers a thread at d = 64 (255 at d = 128)."""
    return max(1, min(splitk_block_limits(d).values()))


def splitk_block_limits(d: int) -> dict:
    """The splitk_fwd blocks one H100 SM could hold by each resource alone (splitk_resident_blocks takes the least)."""
    return block_limits(SPLITK_THREADS, splitk_shared_bytes(d))


# (B, H, S_q, N) where benchmarks/bench_10_splitk.py times the split-K forward: three grids of 128 or 256 query-tile
# blocks, under two per SM, against long keys; then one of 2048 blocks (about 16 per SM) with shorter keys, where
# the unsplit grid already fills the GPU. Module 10's reading tabulates choose_fwd_splits at them.
SPLITK_BENCH_SHAPES = [(1, 8, 1024, 32768), (1, 4, 4096, 16384), (2, 16, 512, 65536), (2, 16, 4096, 8192)]


def choose_fwd_splits(B: int, H: int, S_q: int, N: int, d: int = 64, sms: int = H100_SXM.sms,
                      blocks_per_sm: int | None = None, min_chunk: int = 2048) -> int:
    """The host's choice of ``splits`` for splitk_fwd (head dimension ``d``): a power of two, doubled from 1 while the
    grid, splitk_tiles(S_q) * B * H * splits blocks, still fits one wave of the blocks the GPU holds at once
    (``blocks_per_sm``, default splitk_resident_blocks(d): 4 at d = 64, 2 at d = 128, times ``sms``) and each chunk
    keeps at least ``min_chunk`` keys. An unsplit grid of more than half a wave is not split.

    A forward is compute bound: an SM needs the blocks it can hold, not many waves of them, and splitting past one
    wave only adds partial results, Q reloads and merge work. Where this comes from: the split-count sweeps of
    benchmarks/bench_10_splitk.py on an H100 (two runs cut short, results/splitk_forward_partial.txt, then the full
    run with this rule, results/splitk_forward.json, where its count is within 3% of the fastest at every shape). At
    (B, H, S_q, N) = (1, 8, 1024, 32768), (1, 4, 4096, 16384), (2, 16, 512, 65536), (2, 16, 4096, 8192) the rule
    picks 2, 1, 1, 1 splits at d = 128, where the fastest counts measured were 4 (2 within 3% of it), 1, 1, 1; and
    4, 2, 2, 1 at d = 64, where they were 4, 2 (4 within 1%), 4 (2 within 2%), and the last shape was not reached.
    The earlier rule, about 4 blocks per SM whatever d, picked 5, 3, 3, 1 and lost most at d = 128, where one SM
    holds only two blocks: 3 splits at (1, 4, 4096, 16384) were 14% slower than none. Powers of two, because every
    count of 3, 5 or 9 measured slower than the power of two below it (a power of two cuts these N into whole
    SPLITK_TILE-key tiles; 3, 5 and 9 end all but the last chunk inside one). ``min_chunk`` (32 tiles) is reasoning,
    not measurement: the counts chosen for the rows above leave chunks of 8192 keys or more."""
    wave = (splitk_resident_blocks(d) if blocks_per_sm is None else blocks_per_sm) * sms
    grid = splitk_tiles(S_q) * B * H
    splits = 1
    while grid * 2 * splits <= wave and ceil_div(N, 2 * splits) >= min_chunk:
        splits *= 2
    return splits


def _padded(p, x=None):
    """(p with n_q = the padded query count, x with Q padded by zero rows to whole tiles)."""
    rows = splitk_tiles(p.S_q) * SPLITK_ROWS
    pp = SimpleNamespace(**{**vars(p), "n_q": rows})
    if x is None:
        return pp, None
    q = np.asarray(x["Q"])
    pad = np.zeros(q.shape[:2] + (rows - p.S_q, q.shape[-1]), q.dtype)
    return pp, dict(x, Q=np.concatenate([q, pad], axis=2))


def _tiled(p, out):
    """decode's partial results [B, H, splits, rows, ...] in splitk_fwd's layout [B, H, q_tiles, splits, SPLITK_ROWS,
    ...]; None stays None, and missing outputs stay missing."""
    if out is None:
        return None
    tiles = splitk_tiles(p.S_q)

    def relayout(a):
        a = np.asarray(a)
        a = a.reshape(a.shape[:3] + (tiles, SPLITK_ROWS) + a.shape[4:])
        return np.swapaxes(a, 2, 3)
    return {k: relayout(v) for k, v in out.items()}


def _on_tiles(fn):
    """A function of decode_split's (p, x) as one of splitk_fwd's: Q padded to whole tiles, the result relaid."""
    def wrapped(p, x):
        pp, xx = _padded(p, x)
        return _tiled(p, fn(pp, xx))
    return wrapped


def _splitk_inputs(p, rng):
    return _split_inputs(SimpleNamespace(**{**vars(p), "n_q": p.S_q}), rng)


def _rows_unwritten(p, x):
    """The rows past S_q of the last tile left unwritten (still poisoned: NaN)."""
    if p.S_q % SPLITK_ROWS == 0:
        return None
    out = _on_tiles(_split_ref)(p, x)
    last = np.zeros(splitk_tiles(p.S_q) * SPLITK_ROWS, bool)
    last[p.S_q:] = True
    last = last.reshape(-1, SPLITK_ROWS)[:, None, :]  # [q_tiles, 1, SPLITK_ROWS]
    return dict(O_part=np.where(last[..., None], np.nan, out["O_part"]), L_part=np.where(last, np.nan, out["L_part"]))


def _decode_layout(p, x):
    """Each head's partial results written as decode_split lays them out, [splits][rows] (row tile * SPLITK_ROWS + r
    of split s at (head * splits + s) * q_tiles * SPLITK_ROWS + row), and read back as [q_tiles][splits][rows]."""
    if splitk_tiles(p.S_q) == 1 or p.splits == 1:
        return None
    pp, xx = _padded(p, x)
    tiles = (splitk_tiles(p.S_q), p.splits, SPLITK_ROWS)
    return {k: v.reshape(v.shape[:2] + tiles + v.shape[4:]) for k, v in _split_ref(pp, xx).items()}


def _tile_offset_forgotten(p, x):
    """Every query tile computed with Q rows 0 .. SPLITK_ROWS - 1 of its head (q0 left out of the Q tile's copy)."""
    if p.S_q <= SPLITK_ROWS:
        return None
    pp, xx = _padded(p, x)
    return _tiled(p, _split_ref(pp, dict(xx, Q=xx["Q"][:, :, np.arange(pp.n_q) % SPLITK_ROWS])))


def _q_crossed(p, x):
    """Q's A fragments loaded through crossed ldmatrix addresses (module 08's Q_MATRICES): each 16-row group of a
    query tile mixes the row halves of its two column halves (rows past S_q are the tile's zero rows)."""
    pp, xx = _padded(p, x)
    return _tiled(p, _split_ref(pp, dict(xx, Q=matrices_crossed(xx["Q"]))))


def _chunk_crossed(name):
    """K's or V's fragments loaded through crossed ldmatrix addresses (module 08's K_MATRICES, V_MATRICES): a
    split's tiles start at its chunk's first key, so each chunk (keys start .. end - 1, zero rows past end) is
    crossed in 16-row blocks counted from there."""
    def wrong(p, x):
        pp, xx = _padded(p, x)
        q, k, v = _per_split(xx)
        per_split = {"K": k, "V": v}[name]
        lengths = np.broadcast_to(np.asarray(p.lengths).reshape(p.B, -1), (p.B, p.H))
        chunk = ceil_div(p.N, p.splits)
        crossed = np.zeros(per_split.shape[:2] + (p.splits,) + per_split.shape[3:])
        for b, h, s in np.ndindex(p.B, p.H, p.splits):
            start, end = s * chunk, min(s * chunk + chunk, int(lengths[b, h]))
            if end > start:
                crossed[b, h, s, start:end] = matrices_crossed(per_split[b, h, 0, start:end])
        k, v = (crossed, v) if name == "K" else (k, crossed)
        state = ref.partial_state(q, k, v, scale=float(scale_of(p)), mask=_keep(pp)[..., None, :])
        return _tiled(p, _as_split(ref.finalize_state(state)))
    return wrong


def _every_key(p, x):
    """Every block attends all the valid keys of its batch entry, whatever its split."""
    if p.splits == 1:
        return None
    pp, xx = _padded(p, x)
    keep = _keep(pp, chunk=p.N)  # chunk N: split 0 owns every key, the others none
    keep = np.broadcast_to(keep[:, :, :1], keep.shape)
    return _tiled(p, _as_split(partials(pp, xx, keep)))


def _last_tile_unmasked(tested_against_n):
    """The keys of a chunk's last K/V tile past the chunk's end not masked: their rows were copied as zeros, so each
    adds a score 0 and a zero row of V (a term e^{0 - m} in l, nothing in acc). ``tested_against_n``: the tile is
    taken for an edge tile (and masked right) only when it runs past N, as module 09's test (j + 1) * TILE > N."""
    def wrong(p, x):
        pp, xx = _padded(p, x)
        keep = _keep(pp)
        count = keep.sum(axis=-1)  # [B, 1, splits]
        zeros = np.where(count > 0, -count % SPLITK_TILE, 0)
        if tested_against_n:
            tile_end = np.arange(p.splits) * ceil_div(p.N, p.splits) + count + zeros
            zeros = np.where(tile_end > p.N, 0, zeros)
        if not zeros.any():
            return None
        q, k, v = _per_split(xx)
        state = ref.partial_state(q, k, v, scale=float(scale_of(p)), mask=keep[..., None, :])
        zeros = zeros.astype(np.float64)[..., None]  # a key's count per row
        phantom = (np.where(zeros > 0, 0.0, -np.inf), zeros, np.zeros_like(state[2]))
        phantom = tuple(np.broadcast_to(a, st.shape) for a, st in zip(phantom, state))
        return _tiled(p, _as_split(ref.finalize_state(ref.merge_states(state, phantom))))
    return wrong


_SHARED_MISTAKES = ("padding keys included", "an empty split writes NaN", "chunk end off by one: a key counted twice",
                    "chunk end off by one: the last key of each chunk dropped", "chunk size rounded down",
                    "L_part in base 2", "L_part without the max", "running max starts at 0",
                    "scale computed from d instead of the scale argument", "scale never applied",
                    "scale applied twice")

SPLITK_MISTAKES = [
    *(Mistake(m.name, m.explain, _on_tiles(m.wrong)) for m in SPLIT_MISTAKES if m.name in _SHARED_MISTAKES),
    Mistake("every block attends all the keys",
            "block (tile, s, head) owns only the keys [s * chunk, min((s + 1) * chunk, lengths[b])): a block that "
            "walks every key makes each split the whole softmax, and the merge then counts every key splits times.",
            _every_key),
    *(Mistake("the chunk's last tile not masked",
              "the last K/V tile of a chunk runs past its end (the chunk is rarely a multiple of the tile): give the "
              "keys at or past end the score -INFINITY (the tile is an edge tile when start + j * TILE + TILE > end, "
              "not > N). Loaded as zero rows they still score 0 and add e^{0 - m} to l.",
              _last_tile_unmasked(tested_against_n)) for tested_against_n in (False, True)),
    Mistake("rows past S_q not written",
            "write every row of the tile, those past S_q too: the merge reads whole tiles. Their q was copied as "
            "zeros, so they hold the plain average of the chunk's V rows; no guard is needed.",
            _rows_unwritten),
    Mistake("partial results in decode_split's layout",
            f"a query tile of {SPLITK_ROWS} rows is decode_merge's head: the partial results of block (tile, s, head) "
            f"start at row ((head * q_tiles + tile) * splits + s) * {SPLITK_ROWS} of L_part (times HEAD_DIM in "
            "O_part), [q_tiles][splits][rows] per head, not [splits][S_q] as decode_split writes them.",
            _decode_layout),
    Mistake("every query tile computed with the first tile's rows of Q",
            "block x owns the query rows q0 = blockIdx.x * BLOCK_ROWS onwards: copy the Q tile from row q0 of the "
            "head, not from row 0.",
            _tile_offset_forgotten),
    Mistake(*Q_MATRICES, _q_crossed),
    Mistake(*K_MATRICES, _chunk_crossed("K")),
    Mistake(*V_MATRICES, _chunk_crossed("V")),
]


def _splitk_cases(d):
    return [
        case("one_tile_one_split", B=1, H=1, S_q=64, N=64, splits=1, lengths=(64,), d=d, seed=1),
        case("ragged_chunks", B=1, H=2, S_q=100, N=300, splits=3, lengths=(300,), d=d, seed=2),
        case("splits_not_dividing", B=1, H=1, S_q=64, N=250, splits=4, lengths=(250,), d=d, seed=3),
        case("one_query", B=1, H=1, S_q=1, N=130, splits=2, lengths=(130,), d=d, seed=4),
        case("lengths_full_short_0", B=3, H=1, S_q=70, N=200, splits=3, lengths=(200, 45, 0), d=d, seed=5),
        case("more_splits_than_tiles", B=1, H=1, S_q=64, N=100, splits=8, lengths=(100,), d=d, seed=6),
        case("large_logits", B=1, H=1, S_q=64, N=150, splits=2, lengths=(150,), spread=8.0, d=d, seed=7),
        case("max_in_last_split", B=1, H=1, S_q=40, N=200, splits=3, lengths=(200,), late_peak=30.0, d=d, seed=8),
        case("scores_below_minus_87", B=1, H=1, S_q=64, N=128, splits=2, lengths=(128,), negative=150.0, d=d, seed=9),
        case("custom_scale", B=1, H=2, S_q=30, N=90, splits=2, lengths=(90,), scale=0.3, d=d, seed=10),
        hidden("sizes_odd", B=2, H=2, S_q=77, N=333, splits=5, lengths=(333, 190), d=d),
        hidden("short_and_empty", B=2, H=1, S_q=128, N=150, splits=6, lengths=(0, 37), d=d),
        hidden("custom_scale_peak", B=2, H=1, S_q=50, N=190, splits=3, lengths=(190, 101), scale=0.2, late_peak=40.0,
               d=d),
    ]


for _d in (64, 128):
    exercise(
        id=f"splitk_fwd_d{_d}",
        hidden_sizes={"N": SPLITK_TILE, "S_q": SPLITK_ROWS},
        module=MODULE,
        kernel="splitk_fwd",
        signature="splitk_fwd(const __half* Q, const __half* K, const __half* V, const int* lengths, float* O_part, "
        "float* L_part, int S_q, int N, int H, int splits, float scale)",
        launch_shape=f"compiled with -DHEAD_DIM={_d}; grid = (q_tiles, splits, B * H) with q_tiles = ceil_div(S_q, "
        f"{SPLITK_ROWS}), block = {SPLITK_THREADS} (warp w owns query rows 16w .. 16w + 15 of the tile), dynamic "
        f"shared memory = ({SPLITK_ROWS} + 2 * {SPLITK_STAGES} * {SPLITK_TILE}) * (HEAD_DIM + 8) * 2 bytes: block "
        f"(tile, s, b * H + h) attends query rows tile * {SPLITK_ROWS} .. + {SPLITK_ROWS - 1} of head (b, h) over keys "
        "[s * chunk, min((s + 1) * chunk, lengths[b])), chunk = ceil_div(N, splits), with mma.sync, and writes their "
        f"normalised output O_part [B, H, q_tiles, splits, {SPLITK_ROWS}, d] and natural-log logsumexp L_part "
        f"[B, H, q_tiles, splits, {SPLITK_ROWS}] (float; an empty split: O = 0, L = -INFINITY; rows past S_q too, "
        f"computed from zero rows of Q), the layout decode_merge reads on the grid (q_tiles * H, B) with n_q = "
        f"{SPLITK_ROWS}; Q [B, H, S_q, d], K and V [B, H, N, d] half, lengths [B] int; no causal mask",
        make_inputs=_splitk_inputs,
        outputs=dict(O_part=lambda p: ((p.B, p.H, splitk_tiles(p.S_q), p.splits, SPLITK_ROWS, p.d), F32),
                     L_part=lambda p: ((p.B, p.H, splitk_tiles(p.S_q), p.splits, SPLITK_ROWS), F32)),
        reference=_on_tiles(_split_ref),
        args=lambda p, a: (a.Q, a.K, a.V, a.lengths, a.O_part, a.L_part, np.int32(p.S_q), np.int32(p.N),
                           np.int32(p.H), np.int32(p.splits), scale_of(p)),
        grid=lambda p: (splitk_tiles(p.S_q), p.splits, p.B * p.H),
        block=lambda p: SPLITK_THREADS,
        shared_mem=lambda p: splitk_shared_bytes(p.d),
        options=(f"-DHEAD_DIM={_d}",),
        cases=_splitk_cases(_d),
        magnitude=_on_tiles(_split_magnitude),
        # P is rounded to half for the P V mma: O_part carries half precision, whatever its float32 storage
        tolerance={"O_part": (5e-3, 5e-3)},
        mistakes=SPLITK_MISTAKES,
        race_check=True,
        race_case="ragged_chunks",  # two query tiles, three chunks of two K/V tiles: every buffer is refilled
    )

"""05_masking: causal attention that skips tiles, and per-batch key padding."""
import numpy as np

from .. import reference as ref
from ..exercise_rows import Mistake, case, exercise, hidden
from ..launch import ceil_div
from .shared import (OUTPUTS, forward_magnitude, forward_mistakes, forward_with_mask, keep_mask, qkv, scale_of,
                         tile_skipping_io)

MODULE = "05_masking"
F32 = np.float32
ROWS_PER_BLOCK = 64
BC = 32



def _as_dict(ol):
    return dict(O=ol[0], L=ol[1])


def _causal_ref(p, x):
    return _as_dict(ref.attention_forward(x["Q"], x["K"], x["V"], causal=True, scale=float(scale_of(p))))


def _masked(p, x, keep):
    return _as_dict(forward_with_mask(x, float(scale_of(p)), keep[None, None]))


i_, j_ = (lambda n: np.arange(n)[:, None]), (lambda n: np.arange(n)[None, :])


def _last_row(p):
    """[N, 1]: the last query row of the row block that holds each query i."""
    return np.minimum((i_(p.N) // ROWS_PER_BLOCK + 1) * ROWS_PER_BLOCK, p.N) - 1

exercise(
    id="flash_fwd_causal",
    hidden_sizes={"N": 64, "d": 8},
    module=MODULE,
    kernel="flash_fwd_causal",
    signature="flash_fwd_causal(const float* Q, const float* K, const float* V, float* O, float* L, int N, int d, float scale)",
    launch_shape=f"as flash_fwd_row: grid = (ceil_div(N, {ROWS_PER_BLOCK}), H, B), block = {ROWS_PER_BLOCK}, key tiles "
    f"of {BC}; query i sees keys j <= i; skip every key tile that lies entirely above the block's last row",
    make_inputs=qkv,
    outputs=OUTPUTS,
    reference=_causal_ref,
    args=lambda p, a: (a.Q, a.K, a.V, a.O, a.L, np.int32(p.N), np.int32(p.d), scale_of(p)),
    grid=lambda p: (ceil_div(p.N, ROWS_PER_BLOCK), p.H, p.B),
    block=lambda p: ROWS_PER_BLOCK,
    race_check=True,
    cases=[
        case("single_query", B=1, H=1, N=1, d=32, seed=1),
        case("one_tile", B=1, H=1, N=32, d=32, seed=2),
        case("two_row_blocks", B=1, H=2, N=129, d=32, seed=3),
        case("rising_max", B=1, H=1, N=100, d=64, rising=True, seed=4),
        case("batches_and_heads", B=2, H=2, N=70, d=32, seed=5),
        case("other_scale", B=1, H=2, N=90, d=40, scale=0.6, seed=6),
        case("five_row_blocks", B=1, H=1, N=320, d=16, seed=9),
        case("scores_below_minus_87", B=1, H=1, N=70, d=32, negative=150.0, seed=7),
        case("falling_max", B=1, H=1, N=100, d=32, falling=200.0, seed=8),
        hidden("head_dim_128", B=1, H=1, N=65, d=128),
        hidden("ragged", B=2, H=1, N=150, d=48, spread=5.0),
        hidden("custom_scale_falling", B=1, H=2, N=77, d=24, scale=0.25, falling=150.0),
        hidden("long_sequence", B=1, H=1, N=600, d=64),
    ],
    magnitude=lambda p, x: forward_magnitude(x, float(scale_of(p)), causal=True),
    mistakes=[
        Mistake("query 0 sees no key", "with N = 1 the only query must see key 0 (j <= i includes j = i): keep the "
                f"diagonal key (j <= i, not j < i) and visit the tile that holds it (last_row / {BC} + 1 tiles).",
                lambda p, x: _masked(p, x, np.zeros((p.N, p.N), bool)) if p.N == 1 else None),
        Mistake("mask off by one on the diagonal", "query i may attend to key i itself: keep j <= i, not j < i.",
                lambda p, x: _masked(p, x, j_(p.N) < i_(p.N))),
        Mistake("no causal mask", "query i must not see keys j > i: set those scores to -INFINITY.",
                lambda p, x: _as_dict(ref.attention_forward(x["Q"], x["K"], x["V"], scale=float(scale_of(p))))),
        Mistake("diagonal tiles skipped", "a row block must still process the key tiles that cross the diagonal "
                "(keys up to its last row), masking inside them; only tiles entirely above it can be skipped.",
                lambda p, x: _masked(p, x, (j_(p.N) <= i_(p.N)) & (j_(p.N) < (i_(p.N) // ROWS_PER_BLOCK) * ROWS_PER_BLOCK))),
        Mistake("upper tiles not masked", "tiles are skipped only when entirely above the diagonal; inside the tiles "
                "that cross it, keys j > i still need the mask.",
                lambda p, x: _masked(p, x, (j_(p.N) // BC) * BC <= ((i_(p.N) // ROWS_PER_BLOCK) * ROWS_PER_BLOCK + ROWS_PER_BLOCK - 1))),
        Mistake("one key tile too few", f"the tile holding the block's last row must be visited too: with last_row = "
                f"min(row0 + {ROWS_PER_BLOCK}, N) - 1, loop over last_row / {BC} + 1 tiles (not last_row / {BC}).",
                lambda p, x: _masked(p, x, (j_(p.N) <= i_(p.N)) & (j_(p.N) < (_last_row(p) // BC) * BC))),
        *forward_mistakes(Mistake, BC, keep=lambda p, x: keep_mask(p.N, causal=True)),
    ],
    race_case="two_row_blocks",
    io_check=tile_skipping_io(ROWS_PER_BLOCK, BC, 4),
    io_case="five_row_blocks",
)


def _padded_inputs(p, rng):
    x = qkv(p, rng)
    x["key_lengths"] = np.asarray(p.lengths, dtype=np.int32)
    return x


def _padded_ref(p, x):
    return _as_dict(ref.attention_forward(x["Q"], x["K"], x["V"], scale=float(scale_of(p)), key_lengths=x["key_lengths"]))


def _lengths_keep(p, lengths):
    """[B, H, 1, N] keep-mask of keys j < lengths[b, h]."""
    return np.arange(p.N)[None, None, None, :] < np.asarray(lengths)[..., None, None]


def padding_mistakes(causal=False):
    """The named diagnoses of a kernel that takes key_lengths (per batch entry), for a causal one
    too: each wrong answer keeps the causal mask and gets the padding wrong."""
    def causal_keep(n):
        return (np.arange(n)[None, :] <= np.arange(n)[:, None])[None, None] if causal else True

    def forward(p, x, lengths):
        return _as_dict(ref.attention_forward(x["Q"], x["K"], x["V"], causal=causal, scale=float(scale_of(p)),
                                              key_lengths=lengths))

    def ignored(p, x):
        return forward(p, x, None) if min(x["key_lengths"]) < p.N else None

    def off_by_one(p, x):
        return forward(p, x, np.minimum(x["key_lengths"] + 1, p.N)) if min(x["key_lengths"]) < p.N else None

    def big_negative_leak(p, x):
        """A mask of -1e30 (not -inf) gives a fully-padded row uniform weights over the keys it may
        otherwise see: O = the mean of those rows of V."""
        empty = np.asarray(x["key_lengths"]) == 0
        if not empty.any():
            return None
        o = forward(p, x, x["key_lengths"])["O"].copy()
        v = np.asarray(x["V"], np.float64)[empty]
        seen = np.arange(1, p.N + 1)[:, None]
        o[empty] = np.cumsum(v, axis=-2) / seen if causal else v.mean(axis=-2, keepdims=True)
        return dict(O=o)

    def queries_masked(p, x):
        """Every key attended, but rows i >= key_lengths[b] written as O = 0, L = -inf."""
        if min(x["key_lengths"]) >= p.N:
            return None
        rows = np.arange(p.N)[None, None, :, None] < np.asarray(x["key_lengths"])[:, None, None, None]
        keep = np.broadcast_to(rows, (p.B, 1, p.N, p.N)) & causal_keep(p.N)
        return _as_dict(forward_with_mask(x, float(scale_of(p)), keep))

    def lengths_by_head(p, x):
        """key_lengths indexed by the head (blockIdx.y) instead of the batch entry (blockIdx.z)."""
        if p.H > p.B:
            return None
        by_head = np.broadcast_to(np.asarray(x["key_lengths"])[None, :p.H], (p.B, p.H))
        return _as_dict(forward_with_mask(x, float(scale_of(p)), _lengths_keep(p, by_head) & causal_keep(p.N)))

    return [
        Mistake("key lengths ignored", "keys j >= key_lengths[b] are padding: mask them (score -INFINITY) or skip them.",
                ignored),
        Mistake("padding off by one", "key_lengths[b] counts valid keys, so the last valid key is key_lengths[b] - 1: "
                "keep j < len.", off_by_one),
        Mistake("a large negative mask leaks into fully-masked rows", "with -1e30 instead of -INFINITY, a row whose keys "
                "are all padding gets equal weights on every key (O = mean of V). Use -INFINITY, treat l == 0 as "
                "'no key' and write O = 0, L = -INFINITY.", big_negative_leak),
        Mistake("queries masked instead of keys", "key_lengths[b] limits the keys every query may see (mask scores "
                "j >= len), not which queries are computed: a query row past the length still attends to the valid keys.",
                queries_masked),
        Mistake("key length of another batch entry", "the batch entry is blockIdx.z (the head is blockIdx.y): "
                "read key_lengths[blockIdx.z].", lengths_by_head),
    ]


exercise(
    id="flash_fwd_padded",
    hidden_sizes={"N": 64, "d": 8},
    module=MODULE,
    kernel="flash_fwd_padded",
    signature="flash_fwd_padded(const float* Q, const float* K, const float* V, const int* key_lengths, "
    "float* O, float* L, int N, int d, float scale)",
    launch_shape=f"as flash_fwd_row: grid = (ceil_div(N, {ROWS_PER_BLOCK}), H, B), block = {ROWS_PER_BLOCK}, key "
    f"tiles of {BC}; batch b has key_lengths[b] valid keys (0..N): keys j >= key_lengths[b] are padding for every "
    "query and head; skip tiles that are all padding; a row with no valid key gets O = 0 and L = -INFINITY",
    make_inputs=_padded_inputs,
    outputs=OUTPUTS,
    reference=_padded_ref,
    args=lambda p, a: (a.Q, a.K, a.V, a.key_lengths, a.O, a.L, np.int32(p.N), np.int32(p.d), scale_of(p)),
    grid=lambda p: (ceil_div(p.N, ROWS_PER_BLOCK), p.H, p.B),
    block=lambda p: ROWS_PER_BLOCK,
    race_check=True,
    cases=[
        case("no_padding", B=1, H=1, N=40, d=32, lengths=(40,), seed=1),
        case("ragged_batch", B=3, H=2, N=70, d=32, lengths=(70, 33, 1), seed=2),
        case("empty_sequence", B=2, H=1, N=50, d=32, lengths=(50, 0), seed=3),
        case("tile_boundaries", B=3, H=1, N=96, d=64, lengths=(32, 64, 65), seed=4),
        case("other_scale", B=2, H=1, N=60, d=40, lengths=(45, 0), scale=0.5, seed=5),
        case("scores_below_minus_87", B=2, H=1, N=70, d=32, lengths=(70, 40), negative=150.0, seed=6),
        case("falling_max", B=2, H=1, N=100, d=32, lengths=(100, 0), falling=200.0, seed=7),
        hidden("long_ragged", B=2, H=2, N=150, d=48, lengths=(149, 7)),
        hidden("all_empty_but_one", B=3, H=1, N=40, d=128, lengths=(0, 40, 0)),
        hidden("custom_scale_falling", B=2, H=1, N=90, d=24, lengths=(90, 50), scale=0.2, falling=150.0),
        hidden("long_sequence", B=2, H=1, N=600, d=64, lengths=(600, 333)),
    ],
    magnitude=lambda p, x: forward_magnitude(x, float(scale_of(p)), key_lengths=x["key_lengths"]),
    mistakes=[
        *padding_mistakes(),
        *forward_mistakes(Mistake, BC, keep=lambda p, x: keep_mask(p.N, key_lengths=x["key_lengths"])),
    ],
    race_case="tile_boundaries",
    io_check=tile_skipping_io(ROWS_PER_BLOCK, BC, 4, padded=True),
    io_case="tile_boundaries",
)

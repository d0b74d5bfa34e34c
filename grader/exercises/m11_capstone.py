"""11_capstone: one forward kernel for every configuration a model uses (fp16/bf16, d 64/128, causal
or not, per-batch key padding, any N), as fast as the FlashAttention-2 that PyTorch ships.

The kernel takes its shape at compile time: -DHEAD_DIM, -DELEM_BF16, -DCAUSAL, and the four choices
that decide its speed: -DWARPS (warps per block), -DWARP_ROWS (16 or 32 query rows per warp),
-DTILE (keys per K/V tile) and -DSTAGES (K/V buffers). The graded rows fix them to CONFIG;
``grader.autotune`` varies them, and ``python -m grader bench capstone FILE`` times the kernel in
every configuration with the best choices found on the H100 (benchmarks/results/capstone.json, whose
launch choices the package keeps as capstone_tuned.json).
"""
import json
from types import SimpleNamespace
from pathlib import Path

import numpy as np

from .. import benchspec
from .. import reference as ref
from ..arrays import BF16, bf16_bits, bf16_values
from ..errors import CourseError
from ..exercise_rows import BACKWARD_NAN, Exercise, Mistake, Space, case, exercise, hidden, register_space
from ..launch import ceil_div
from .shared import K_MATRICES, KEY_FROM_G, Q_MATRICES, V_MATRICES, backward_magnitude, forward_magnitude, \
    forward_mistakes, forward_with_mask, keep_mask, matrices_crossed, qkv, scale_of, tile_skipping_io
from .m05_masking import padding_mistakes

MODULE = "11_capstone"
KERNEL = "capstone_fwd"
F16, F32 = np.float16, np.float32
CONFIG = {"WARPS": 4, "WARP_ROWS": 32, "TILE": 64, "STAGES": 2}  # the graded rows' launch
SPACE = {"WARPS": (4, 8), "WARP_ROWS": (16, 32), "TILE": (32, 64, 128), "STAGES": (2, 3), "Q_IN_REGS": (0, 1),
         "LAZY_RESCALE": (0, 1)}
CONFIGS = [(dtype, d, causal) for dtype in ("fp16", "bf16") for d in (64, 128) for causal in (False, True)]
# Package data: the launch choices of the committed GPU run (tuned_choices of benchmarks/results/capstone.json),
# written by `python benchmarks/bench_11_capstone.py tuned`; tests/test_capstone.py holds them equal.
TUNED = Path(__file__).with_name("capstone_tuned.json")


def excluded(d, cfg):
    """Why a configuration is not worth trying, or None."""
    if cfg.get("Q_IN_REGS") and cfg["WARP_ROWS"] * d > 2048:
        return (f"Q in registers: {cfg['WARP_ROWS']} rows x {d} halves are {cfg['WARP_ROWS'] * d // 64} more registers "
                "per thread beside the accumulator (over 255: spilled)")
    return None


def block_rows(cfg):
    return cfg["WARPS"] * cfg["WARP_ROWS"]


def shared_bytes(d, cfg):
    """The Q tile and STAGES (K, V) tile pairs of 2-byte elements, each row padded by 8 elements."""
    return (block_rows(cfg) + 2 * cfg["STAGES"] * cfg["TILE"]) * (d + 8) * 2


def _inputs(bf16):
    def make(p, rng):
        x = {name: bf16_bits(v) if bf16 else v.astype(F16) for name, v in qkv(p, rng).items()}
        x["key_lengths"] = np.asarray(getattr(p, "lengths", (p.N,) * p.B), dtype=np.int32)
        return x
    return make


def _values(x, dtype=F32):
    """Q, K, V (and dO) as the values they hold, in ``dtype`` (bfloat16 bits decoded, half widened); the
    rest as given."""
    return {name: (bf16_values(v) if v.dtype == np.uint16 else v).astype(dtype) if name in ("Q", "K", "V", "dO")
            else v for name, v in x.items()}


def _keep(p, x):
    return keep_mask(p.N, causal=p.causal, key_lengths=x["key_lengths"])


def _crossed(name):
    """The forward with ``name``'s fragments (K, Q or V) loaded through crossed ldmatrix addresses (module
    08's matrices_crossed), on the kernel's inputs as values (``v``); rows past N are the tile's zero-filled
    rows."""
    def model(p, v):
        v = dict(v, **{name: matrices_crossed(v[name])})
        o, lse = ref.attention_forward(v["Q"], v["K"], v["V"], causal=p.causal, scale=float(scale_of(p)),
                                       key_lengths=v["key_lengths"])
        return dict(O=o) if name == "V" else dict(O=o, L=lse)
    return model


def _reference(p, x):
    v = _values(x)
    o, lse = ref.attention_forward(v["Q"], v["K"], v["V"], causal=p.causal, scale=float(scale_of(p)),
                                   key_lengths=v["key_lengths"])
    return dict(O=o, L=lse)


def _magnitude(p, x):
    v = _values(x)
    return forward_magnitude(v, float(scale_of(p)), causal=p.causal, key_lengths=v["key_lengths"])


def _causal_mistakes():
    i_, j_ = (lambda n: np.arange(n)[:, None]), (lambda n: np.arange(n)[None, :])

    def masked(keep_ij):
        def wrong(p, x):
            if not p.causal:
                return None
            lengths = keep_mask(p.N, key_lengths=x["key_lengths"])
            o, lse = forward_with_mask(x, float(scale_of(p)), keep_ij(p)[None, None] & lengths)
            return dict(O=o, L=lse)
        return wrong

    return [
        Mistake("no causal mask", "query i must not see keys j > i: in the tiles that cross the diagonal, set those "
                "scores to -INFINITY before the row max.", masked(lambda p: np.ones((p.N, p.N), bool))),
        Mistake("causal mask off by one", "query i may attend to key i itself: keep key <= row, not key < row.",
                masked(lambda p: j_(p.N) < i_(p.N))),
    ]


def tile_walk_keep(p, lengths, cfg, needs_mask, keep_masked):
    """Which keys each query row attends when a kernel walks the key tiles as the capstone does, with
    the choice of masked tiles (``needs_mask(key0, w0, kv_len)``) and the masked path's rule
    (``keep_masked(at)``, ``at`` holding keys, row, q0, w0, rg, kv_len and N) given, so that a slip in
    either can be reproduced.
    A block visits ceil_div(kv_len, TILE) tiles (causal: none past its last row), a warp skips
    (causal) the tiles whose first key is past its last row, and an unmasked tile attends all its keys,
    the zero-filled rows past N too (score 0, value 0). Returns (keep [B, 1, N, nk], nk)."""
    tile, rows, warp_rows = cfg["TILE"], block_rows(cfg), cfg["WARP_ROWS"]
    nk = max(p.N, -(-p.N // tile) * tile)
    keep = np.zeros((p.B, 1, p.N, nk), bool)
    for b, kv_len in enumerate(int(n) for n in lengths):
        for i in range(p.N):
            q0 = i // rows * rows
            w0 = q0 + (i - q0) // warp_rows * warp_rows
            tiles = -(-kv_len // tile)
            if p.causal:
                tiles = min(tiles, -(-(q0 + rows) // tile))
            for key0 in range(0, tiles * tile, tile):
                if p.causal and key0 > w0 + warp_rows - 1:
                    continue
                at = SimpleNamespace(keys=np.arange(key0, key0 + tile), row=i, q0=q0, w0=w0, rg=(i - w0) // 16,
                                     kv_len=kv_len, N=p.N)
                keep[b, 0, i, key0:key0 + tile] = keep_masked(at) if needs_mask(key0, w0, kv_len) else True
    return keep, nk


def _walk_mistake(cfg, name, explain, needs_mask, keep_masked, causal_only=False):
    def wrong(p, x):
        if causal_only and not p.causal:
            return None
        keep, nk = tile_walk_keep(p, x["key_lengths"], cfg, needs_mask, keep_masked)
        zeros = np.zeros((p.B, p.H, nk - p.N, p.d))
        grown = {n: np.concatenate([np.asarray(x[n], np.float64), zeros], axis=-2) for n in "KV"}
        o, lse = forward_with_mask(dict(Q=x["Q"], **grown), float(scale_of(p)), keep)
        return dict(O=o, L=lse)
    return Mistake(name, explain, wrong)


def _walk_mistakes(causal, cfg):
    """The slips in choosing the masked tiles or in the mask itself, each reproduced by the tile walk."""
    tile = cfg["TILE"]

    def crosses_length(key0, w0, kv_len):
        return key0 + tile > kv_len

    def crosses_diagonal(key0, w0, kv_len):
        return causal and key0 + tile - 1 > w0

    def masked_with(bound, row_shift=lambda at: 0):
        return lambda at: (at.keys < bound(at)) & ((at.keys <= at.row - row_shift(at)) if causal else True)

    right = masked_with(lambda at: at.kv_len)

    def needs(key0, w0, kv_len):
        return crosses_length(key0, w0, kv_len) or crosses_diagonal(key0, w0, kv_len)

    return [
        _walk_mistake(cfg, "keys past the length attended up to the end of their tile",
                      f"the tile that holds the last valid key also needs the mask: call attend<true> when key0 + "
                      f"{tile} > kv_len" + (", not only for the tiles that cross the causal diagonal." if causal else "."),
                      crosses_diagonal, right),
        _walk_mistake(cfg, "no tile masked", "attend<true> must run for every tile that holds a key at or past kv_len "
                      "(the keys past the length, and the zero-filled rows past N, are in it)"
                      + (" and for every tile that crosses the warp's diagonal (key0 + TILE - 1 > w0)" if causal else "")
                      + "; attend<false> only for the others.",
                      lambda key0, w0, kv_len: False, right),
        _walk_mistake(cfg, "the mask compares the keys with N, not with the batch entry's length",
                      "inside attend<true>, a key is masked when key >= kv_len (= key_lengths[b]); comparing with N "
                      "leaves the padding keys of the tile that holds the last valid one visible.",
                      needs, masked_with(lambda at: at.N)),
        _walk_mistake(cfg, "diagonal tiles run unmasked", "a tile needs attend<true> when it crosses the warp's diagonal "
                      "(key0 + TILE - 1 > w0: some key lies past some row of the warp), not only when it holds keys "
                      "past the length; the tiles past the warp's last row are skipped, but the crossing ones are "
                      "not whole.", crosses_length, right, causal_only=True),
        _walk_mistake(cfg, "the mask's rows counted from the block's first row",
                      "attend's row0 is the warp's first query row, w0 = q0 + WARP_ROWS * warp: with q0 every warp "
                      "but the first masks as if it held the block's first rows.",
                      needs, masked_with(lambda at: at.kv_len, lambda at: at.w0 - at.q0), causal_only=True),
        _walk_mistake(cfg, *KEY_FROM_G, needs, lambda at: right(
            SimpleNamespace(**{**vars(at), "keys": at.keys // 8 * 8 + 2 * (at.row % 8) + at.keys % 2}))),
        _walk_mistake(cfg, "the mask's row misses the row group",
                      "in attend<true>, the row of score e of row group rg is row0 + rg * 16 + g + (e / 2) * 8: without "
                      "rg * 16 the second group of 16 rows is masked as if it were the first.",
                      needs, masked_with(lambda at: at.kv_len, lambda at: 16 * at.rg), causal_only=True),
    ]


CASES = [  # the race check runs on the first case: three query blocks, five key tiles, a ragged batch
    case("five_tiles_ragged", B=2, H=1, N=300, lengths=(300, 40), seed=1),
    case("single_query", B=1, H=1, N=1, seed=2),
    case("one_block_two_tiles", B=1, H=2, N=128, seed=3),
    case("tile_plus_one", B=1, H=1, N=65, seed=4),
    case("rising_max", B=1, H=1, N=200, rising=True, seed=5),
    case("large_logits", B=1, H=1, N=100, spread=8.0, seed=6),
    case("scores_below_minus_87", B=1, H=1, N=150, negative=150.0, seed=7),
    case("falling_max", B=2, H=1, N=200, lengths=(200, 150), falling=100.0, seed=8),
    case("empty_sequence", B=2, H=2, N=70, lengths=(70, 0), seed=9),
    case("custom_scale", B=1, H=1, N=190, scale=0.3, seed=10),
    hidden("sizes_257", B=2, H=2, N=257, lengths=(257, 129)),
    hidden("late_peak", B=1, H=1, N=333, late_peak=12.0),
    hidden("tile_boundaries", B=3, H=1, N=192, lengths=(64, 65, 0)),
    # every p = 1, every value about 300: the output accumulator passes half's 65504 (kept in half, it overflows)
    hidden("uniform_large_values", B=1, H=1, N=256, spread=0.0, v_offset=300.0),
]


def variant(d, dtype="fp16", causal=False, cfg=None, register=True):
    """The exercise row of one (d, dtype, causal) build with launch choices ``cfg`` (CONFIG by
    default): the graded rows below, and the builds the benchmarks time (``register=False``)."""

    cfg = dict(CONFIG, **(cfg or {}))
    bf16 = dtype == "bf16"
    ex_id = f"{KERNEL}_{'bf16_' if bf16 else ''}{'causal_' if causal else ''}d{d}" + \
        ("" if cfg == CONFIG else "_" + "_".join(f"{k.lower()}{v}" for k, v in cfg.items()))
    options = (f"-DHEAD_DIM={d}",) + (("-DELEM_BF16=1",) if bf16 else ()) + (("-DCAUSAL=1",) if causal else ()) + \
        tuple(f"-D{k}={v}" for k, v in cfg.items())
    rows_per_block = block_rows(cfg)
    elem = "__nv_bfloat16" if bf16 else "__half"
    mistakes = [*_causal_mistakes(), *padding_mistakes(causal), *_walk_mistakes(causal, cfg),
                 *forward_mistakes(Mistake, cfg["TILE"], keep=_keep), Mistake(*K_MATRICES, _crossed("K")),
                 Mistake(*Q_MATRICES, _crossed("Q")), Mistake(*V_MATRICES, _crossed("V"))]
    mistakes = [Mistake(m.name, m.explain, lambda p, x, w=m.wrong: w(p, _values(x))) for m in mistakes]
    row = dict(
        id=ex_id,
        hidden_sizes={"N": 64},
        module=MODULE,
        kernel=KERNEL,
        signature=f"{KERNEL}(const elem* Q, const elem* K, const elem* V, const int* key_lengths, elem* O, float* L, "
        "int N, float scale)",
        launch_shape=f"compiled with {' '.join(options)} (elem = {elem}); grid = (ceil_div(N, WARPS * WARP_ROWS), H, "
        "B), block = 32 * WARPS threads (warp w owns query rows WARP_ROWS w .. WARP_ROWS (w + 1) - 1 of the block's "
        "tile); dynamic shared memory = (WARPS * WARP_ROWS + 2 * STAGES * TILE) * (HEAD_DIM + 8) * 2 bytes; batch b "
        "has key_lengths[b] valid keys (0..N), a row with none gets O = 0 and L = -INFINITY"
        f"{'; query row i sees keys 0..i' if causal else ''}; Q, K, V, O [B, H, N, d], L [B, H, N] float "
        "(natural-log logsumexp)",
        make_inputs=_inputs(bf16),
        outputs=dict(O=lambda p: ((p.B, p.H, p.N, p.d), BF16 if bf16 else F16), L=lambda p: ((p.B, p.H, p.N), F32)),
        reference=_reference,
        magnitude=_magnitude,
        args=lambda p, a: (a.Q, a.K, a.V, a.key_lengths, a.O, a.L, np.int32(p.N), scale_of(p)),
        grid=lambda p: (ceil_div(p.N, rows_per_block), p.H, p.B),
        block=lambda p: 32 * cfg["WARPS"],
        shared_mem=lambda p: shared_bytes(d, cfg),
        options=options,
        cases=[_with(c, d=d, causal=causal) for c in CASES],
        race_check=True,
        race_case="five_tiles_ragged",
        mistakes=mistakes,
        io_check=tile_skipping_io(rows_per_block, cfg["TILE"], 2, padded=True, causal=causal),
        io_case="five_tiles_ragged",
    )
    ex = exercise(**row) if register else Exercise(**row)
    bench = benchspec.forward_spec(ex_id, d=d, causal=causal, padded=True)
    if register:
        benchspec.SPECS[ex_id] = bench
        register_space(Space(
            exercise=ex_id,
            params=SPACE,
            grid=lambda p, c: (ceil_div(p.N, block_rows(c)), p.H, p.B),
            block=lambda p, c: 32 * c["WARPS"],
            shared_mem=lambda p, c: shared_bytes(d, c),
            exclude=lambda c: excluded(d, c),
            row_fields=lambda c: {"io_check": tile_skipping_io(block_rows(c), c["TILE"], 2, padded=True, causal=causal)},
        ))
    return ex, bench


def _with(c, **params):
    return case(c.name, c.seed, **c.params, **params) if not c.hidden else hidden(c.name, **c.params, **params)


def tuned_choices(run: dict) -> dict:
    """What the package keeps of a benchmarks/bench_11_capstone.py run: the configuration, S (bench
    records) and the launch choices of each ``tuned`` and ``bench`` record, in the run's order."""
    def keep(r, *extra):
        return {k: r[k] for k in ("dtype", "d", "causal", *extra, *SPACE) if k in r}

    return {"tuned": [keep(r) for r in run.get("tuned", [])], "bench": [keep(r, "S") for r in run.get("bench", [])]}


def tuned_configs(S: int | None = None) -> dict:
    """{(dtype, d, causal): cfg}: the fastest launch choices the GPU run found, CONFIG where none. The
    sweep chose at S = 4096; with ``S``, the choices the run kept at that length (its bench records:
    benchmarks/bench_11_capstone.py times the sweep's fastest few again at each longer S) where it has them."""
    try:
        run = json.loads(TUNED.read_text())
    except OSError as err:
        raise CourseError(f"{TUNED} is missing ({err.strerror}): the capstone's tuned launch choices are package data of "
                          "grader; reinstall it, or write them with python benchmarks/bench_11_capstone.py tuned") from None
    found = {(r["dtype"], r["d"], r["causal"]): {k: r[k] for k in SPACE if k in r} for r in run.get("tuned", [])}
    if S is not None:
        found |= {(r["dtype"], r["d"], r["causal"]): {k: r[k] for k in SPACE if k in r}
                  for r in run.get("bench", []) if r.get("S") == S}
    return {key: found.get(key, dict(CONFIG)) for key in CONFIGS}


# The graded builds: both head sizes, causal, and bf16 (the emulator checks each in a few seconds).
for _dtype, _d, _causal in [("fp16", 64, False), ("fp16", 128, False), ("fp16", 64, True), ("bf16", 128, True)]:
    variant(_d, _dtype, _causal)


# --------------------------------------------------------------------------- the backward: dK/dV and dQ

BWD_CONFIG = {"dkdv": {"WARPS": 4, "TILE": 64, "STAGES": 2}, "dq": {"WARPS": 4, "WARP_ROWS": 16, "TILE": 64, "STAGES": 2}}
BWD_OUTPUTS = {"dkdv": ("dK", "dV"), "dq": ("dQ",)}
# The fused build's graded choices: 128 keys a block, so that in a causal block the warps of its second
# half skip its first query tile (their dS^T rows must still be zeros for the block's dQ product).
FUSED_CONFIG = {"FUSED_DQ": 1, "WARPS": 8}
LOG2E = 1.4426950408889634


def bwd_block_rows(part, cfg):
    """Keys (dK/dV: 16 per warp) or query rows (dQ) one block owns."""
    return cfg["WARPS"] * (16 if part == "dkdv" else cfg["WARP_ROWS"])


def bwd_shared_bytes(part, d, cfg):
    """dK/dV: the block's K and V rows and STAGES (Q, dO) tiles, each row padded by 8 elements, and
    STAGES (L, D) float tiles, then with FUSED_DQ the block's dS^T (its keys x TILE + 8 elements); dQ:
    the block's Q and dO rows and STAGES (K, V) tiles."""
    rows = 2 * bwd_block_rows(part, cfg) + 2 * cfg["STAGES"] * cfg["TILE"]
    stats = 2 * cfg["STAGES"] * cfg["TILE"] * 4 if part == "dkdv" else 0
    ds = bwd_block_rows(part, cfg) * (cfg["TILE"] + 8) * 2 if cfg.get("FUSED_DQ") else 0
    return rows * (d + 8) * 2 + stats + ds


def bwd_outputs(part, cfg):
    """What a build writes: dK/dV, with dQ too when fused (FUSED_DQ=1); or dQ."""
    return BWD_OUTPUTS[part] + (("dQ",) if cfg.get("FUSED_DQ") else ())


def _bwd_inputs(bf16):
    """Q, K, V and dO in half precision (bf16 as bits), with what the forward saved computed from their
    values in float64: L (float32), and D = rowsum(dO * O) (float32) from the preprocessing step."""
    def make(p, rng):
        drawn = qkv(p, rng) | {"dO": rng.standard_normal((p.B, p.H, p.N, p.d))}
        x = {name: bf16_bits(v) if bf16 else v.astype(F16) for name, v in drawn.items()}
        x["key_lengths"] = np.asarray(getattr(p, "lengths", (p.N,) * p.B), dtype=np.int32)
        v = _values(x, np.float64)
        o, lse = ref.attention_forward(v["Q"], v["K"], v["V"], causal=p.causal, scale=float(scale_of(p)),
                                       key_lengths=v["key_lengths"])
        x["L"] = lse.astype(F32)
        x["D"] = ref.backward_preprocess(o, v["dO"]).astype(F32)
        return x
    return make


def _bwd_grads(p, x, keep=None, lse_factor=1.0, use_lse=True, use_d=True, scale_out=None, padding_rows=True,
               crossed=()):
    """dQ, dK, dV in float64 from the kernel's own inputs (its L and D); the switches reproduce bugs:
    ``keep`` a wrong mask, ``lse_factor`` L taken in another base, ``use_lse``/``use_d`` a missing term,
    ``scale_out`` a wrong factor in dQ and dK, ``padding_rows=False`` dK, dV of padding keys not zeroed,
    ``crossed`` the operands ("Q.S": Q in the product S, see BWD_LOADS) loaded with crossed ldmatrix matrices."""
    v = _values(x, np.float64)

    def use(name, product, value=None):
        value = v[name] if value is None else value
        return matrices_crossed(value) if f"{name}.{product}" in crossed else value

    s = float(scale_of(p))
    keep = _keep(p, x) if keep is None else keep
    lse = np.asarray(v["L"], np.float64)[..., None] * lse_factor if use_lse else 0.0
    out = s if scale_out is None else scale_out
    rows_valid = (np.arange(p.N)[None, :] < np.asarray(v["key_lengths"])[:, None])[:, None, :, None] | (not padding_rows)
    with np.errstate(over="ignore", invalid="ignore"):  # the bug models may overflow P
        P = np.exp(s * use("Q", "S") @ np.swapaxes(use("K", "S"), -1, -2) - lse)
        P = np.where(np.broadcast_to(keep, P.shape), P, 0.0) if keep is not None else P
        dS = P * (use("dO", "dP") @ np.swapaxes(use("V", "dP"), -1, -2)
                  - (np.asarray(v["D"], np.float64)[..., None] if use_d else 0.0))
        return dict(dQ=out * use("dS", "dQ", dS) @ use("K", "dQ"),
                    dK=np.where(rows_valid, out * np.swapaxes(dS, -1, -2) @ use("Q", "dK"), 0.0),
                    dV=np.where(rows_valid, np.swapaxes(P, -1, -2) @ use("dO", "dV"), 0.0))


# The ldmatrix loads of each backward kernel, as (operand, product): the product's formula as the
# forward-facing gradients write it (the dK/dV kernel computes the transposes S^T = K Q^T, dP^T = V dO^T).
BWD_PRODUCTS = {"S": "S = Q K^T", "dP": "dP = dO V^T", "dQ": "dQ = dS K", "dK": "dK = dS^T Q", "dV": "dV = P^T dO"}
BWD_LOADS = {"dkdv": ("K.S", "V.dP", "Q.S", "dO.dP", "dO.dV", "Q.dK"), "fused": ("dS.dQ", "K.dQ"),
             "dq": ("Q.S", "dO.dP", "K.S", "V.dP", "K.dQ")}


def _crossed_load(load):
    """A load's named mistake: its ldmatrix matrices crossed."""
    operand, product = load.split(".")
    return (f"{operand}'s four ldmatrix matrices in the wrong order (its load for {product})",
            f"in the ldmatrix_x4 of {operand} for {BWD_PRODUCTS[product]} (or its transpose) each lane's matrix "
            "address takes its row half and its column half from the wrong bits of m = lane / 8 (m % 2 and m / 2 "
            "swapped): every 16 x 16 block of the tile has its two off-diagonal 8 x 8 quarters traded, in this "
            "product only (module 08's reading shows the order each operand needs).")


def _bwd_magnitude(outputs):
    def size(p, x):
        v = _values(x, np.float64)
        m = backward_magnitude(v, float(scale_of(p)), keep=_keep(p, x))
        return {n: m[n] for n in outputs}
    return size


def _unpadded(p):
    """The keep-mask of a kernel that ignores key_lengths: causal only, or every key."""
    return keep_mask(p.N, causal=True) if p.causal else np.ones((1, 1, p.N, p.N), bool)


def _bwd_mistakes(part, causal, rows, fused=False, tile=64):
    outputs = bwd_outputs(part, {"FUSED_DQ": fused})

    def only(grads):
        return {n: grads[n] for n in outputs}

    def wrong(**how):
        """The model of a mistake: _bwd_grads' switches, ``keep`` given as a function of (p, x) if it needs them."""
        def model(p, x):
            keep = how.get("keep")
            return only(_bwd_grads(p, x, **{**how, "keep": keep(p, x) if callable(keep) else keep}))
        return model

    padding = "padding keys attended"
    padding_why = "a key at or past key_lengths[b] has P = 0 for every query" + (
        " (mask it in the tiles that cross kv_len)." if part == "dq" else
        " and gets dK = dV = 0 (write zeros for those rows)" + (
            "; for dQ its P must be 0 too: mask it in every tile of a block that holds padding keys." if fused
            else "."))
    found = [
        Mistake("P recomputed without L", "P = exp(scale*q.k - L) with the row's saved logsumexp L: the forward's "
                "final normaliser, so no running max is needed here.", wrong(use_lse=False)),
        Mistake("L used as if it were in base 2", "L is a natural logarithm: in the exponent of exp2 it becomes "
                "L * log2(e), as scale does (scale * log2(e))", wrong(lse_factor=1 / LOG2E)),
        Mistake("dS without the D term", "dS = P * (dP - D), D = rowsum(dO * O) from the preprocessing step.",
                wrong(use_d=False)),
        Mistake("the scale missing at the end", f"{' and '.join(n for n in outputs if n != 'dV')} = scale * (...): "
                "the chain rule through S = scale*QK^T brings it in (not into dV).",
                wrong(scale_out=1.0)),
        Mistake(padding, padding_why, lambda p, x: wrong(keep=lambda p, x: _unpadded(p), padding_rows=False)(p, x)
                if (x["key_lengths"] < p.N).any() else None),
    ]
    if part == "dkdv":
        def kept_in_last_block(p, x):
            """Padding rows not zeroed, in a kernel that skips the blocks of padding keys: only the keys past
            kv_len in the block that holds the last valid one keep what the loop computed."""
            if not (x["key_lengths"] < p.N).any():
                return None
            right, computed = _bwd_grads(p, x), _bwd_grads(p, x, keep=_unpadded(p), padding_rows=False)
            kept = np.zeros((p.B, 1, p.N, 1), bool)
            for b, n in enumerate(int(n) for n in x["key_lengths"]):
                if 0 < n < p.N:
                    kept[b, 0, n:min(ceil_div(n, rows) * rows, p.N)] = True
            return {n: np.where(kept, computed[n], right[n]) if n != "dQ" else right[n] for n in outputs}
        found.append(Mistake(padding, padding_why, kept_in_last_block))
    if fused:
        def padded_dq(diagonal_only):
            """dK, dV right (padding rows zeroed at the end) but dQ summed over the padding keys of the block
            that holds the last valid key (the blocks past it never run): in every tile, or, with the key test
            taken only in the tiles that cross a causal block's diagonal, in its other tiles."""
            def model(p, x):
                if (diagonal_only and not p.causal) or not (x["key_lengths"] < p.N).any():
                    return None
                i, j = np.arange(p.N)[:, None], np.arange(p.N)[None, :]
                unmasked = i // tile * tile >= j // rows * rows + rows - 1 if diagonal_only else True
                keep = np.zeros((p.B, 1, p.N, p.N), bool)
                for b, n in enumerate(int(n) for n in x["key_lengths"]):
                    reached = min(ceil_div(n, rows) * rows, p.N)
                    keep[b, 0] = ((j <= i) | (not p.causal)) & ((j < n) | ((j < reached) & unmasked))
                return only(_bwd_grads(p, x) | {"dQ": _bwd_grads(p, x, keep=keep)["dQ"]})
            return model

        dq_why = "the padding keys' dK and dV are zeroed at the end, but their dS went into dQ: "
        found += [
            Mistake("padding keys in dQ", dq_why + "P = 0 for a key at or past key_lengths[b], in every tile of a "
                    "block that holds such keys (the tiles of other blocks need no test).", padded_dq(False)),
            Mistake("padding keys in dQ", dq_why + "a block that holds keys at or past key_lengths[b] takes the "
                    "masked tile_grads in every tile, not only in those that cross its diagonal.", padded_dq(True)),
            Mistake("dQ never added (the FUSED_DQ build)", "with -DFUSED_DQ=1 each block adds scale * dS K over "
                    "its keys into dQ (zero-filled by the launch) with atomic_add2: the dS^T tile in shared "
                    "memory, a __syncthreads(), then tile_dq_atomic.", lambda p, x: only(_bwd_grads(p, x) | {
                        "dQ": np.zeros((p.B, p.H, p.N, p.d))})),
        ]
    loads = BWD_LOADS[part] + (BWD_LOADS["fused"] if fused else ())
    found += [Mistake(*_crossed_load(load), wrong(crossed={load})) for load in loads]
    if causal:
        i_, j_ = (lambda n: np.arange(n)[:, None]), (lambda n: np.arange(n)[None, :])
        lengths = lambda p, x: keep_mask(p.N, key_lengths=x["key_lengths"])  # noqa: E731
        found += [
            Mistake("no causal mask", "query i does not see keys j > i: P = 0 there, in every tile that crosses "
                    "the diagonal.", wrong(keep=lengths)),
            Mistake("causal mask off by one", "query i sees key i itself: keep key <= row, not key < row.",
                    wrong(keep=lambda p, x: (j_(p.N) < i_(p.N))[None, None] & lengths(p, x))),
        ]
    return found


def bwd_variant(part, d, dtype="fp16", causal=False, cfg=None, register=True):
    """The exercise row of one build of ``capstone_bwd_dkdv`` or ``capstone_bwd_dq`` (``part`` "dkdv"
    or "dq"), as ``variant`` does for the forward."""

    fused = bool((cfg or {}).get("FUSED_DQ"))
    base = dict(BWD_CONFIG[part], **(FUSED_CONFIG if fused else {}))
    cfg = dict(base, **(cfg or {}))
    bf16 = dtype == "bf16"
    kernel = f"capstone_bwd_{part}"
    ex_id = f"{kernel}_{'fused_' if fused else ''}{'bf16_' if bf16 else ''}{'causal_' if causal else ''}d{d}" + \
        ("" if cfg == base else "_" + "_".join(f"{k.lower()}{v}" for k, v in cfg.items() if k != "FUSED_DQ"))
    options = (f"-DHEAD_DIM={d}",) + (("-DELEM_BF16=1",) if bf16 else ()) + (("-DCAUSAL=1",) if causal else ()) + \
        tuple(f"-D{k}={v}" for k, v in cfg.items())
    rows = bwd_block_rows(part, cfg)
    elem = "__nv_bfloat16" if bf16 else "__half"
    outputs = bwd_outputs(part, cfg)
    # P and dS enter the products rounded to the inputs' type: a relative error of 2^-11 (fp16) or 2^-8 (bf16) in
    # each term, so at most that share of the terms' size (the magnitude); twice it is the tolerance. The dtype's
    # own (4e-3, 2e-2) would hide a missing D term in dQ behind its worst-case sum.
    half_tol = (8e-3, 8e-3) if bf16 else (1e-3, 1e-3)
    if part == "dkdv":
        shape = (f"grid = (ceil_div(N, 16 * WARPS), H, B), block = 32 * WARPS threads (warp w owns keys "
                 "16 w .. 16 w + 15 of the block's and walks the query tiles of TILE rows: from the one holding the "
                 "block's first key when causal); dynamic shared memory = (32 * WARPS + 2 * STAGES * TILE) * "
                 "(HEAD_DIM + 8) * 2 + 8 * STAGES * TILE bytes" + (
                     " + 32 * WARPS * (TILE + 8) (the block's dS^T)" if fused else "") +
                 "; dK, dV float [B, H, N, d], zero for padding keys" + (
                     "; dQ float [B, H, N, d], zero-filled before the launch, each block adding its keys' share with "
                     "atomics" if fused else "; dQ is not touched (FUSED_DQ=0)"))
        signature = (f"{kernel}(const elem* Q, const elem* K, const elem* V, const elem* dO, const float* L, "
                     "const float* D, const int* key_lengths, float* dK, float* dV, float* dQ, int N, float scale)")
        args = lambda p, a: (a.Q, a.K, a.V, a.dO, a.L, a.D, a.key_lengths, a.dK, a.dV, a.dQ,  # noqa: E731
                             np.int32(p.N), scale_of(p))
        io_check = tile_skipping_io(rows, cfg["TILE"], 2, backward=True, padded=True) if causal else None
    else:
        shape = (f"grid = (ceil_div(N, WARPS * WARP_ROWS), H, B), block = 32 * WARPS threads (warp w owns query "
                 "rows WARP_ROWS w .. WARP_ROWS (w + 1) - 1 of the block's and walks the K/V tiles of TILE keys); "
                 "dynamic shared memory = (2 * WARPS * WARP_ROWS + 2 * STAGES * TILE) * (HEAD_DIM + 8) * 2 bytes; "
                 "dQ float [B, H, N, d]")
        signature = (f"{kernel}(const elem* Q, const elem* K, const elem* V, const elem* dO, const float* L, "
                     "const float* D, const int* key_lengths, float* dQ, int N, float scale)")
        args = lambda p, a: (a.Q, a.K, a.V, a.dO, a.L, a.D, a.key_lengths, a.dQ, np.int32(p.N),  # noqa: E731
                             scale_of(p))
        io_check = tile_skipping_io(rows, cfg["TILE"], 2, padded=True, causal=causal)
    row = dict(
        id=ex_id,
        hidden_sizes={"N": 64},
        module=MODULE,
        kernel=kernel,
        signature=signature,
        launch_shape=f"compiled with {' '.join(options)} (elem = {elem}); {shape}; batch b has key_lengths[b] valid "
        f"keys (0..N){'; query row i sees keys 0..i' if causal else ''}; Q, K, V, dO [B, H, N, d] in elem, L (the "
        "forward's natural-log logsumexp) and D = rowsum(dO * O) float [B, H, N]",
        make_inputs=_bwd_inputs(bf16),
        outputs={n: (lambda p: ((p.B, p.H, p.N, p.d), F32)) for n in outputs},
        reference=lambda p, x: {n: g for n, g in _bwd_grads(p, x).items() if n in outputs},
        magnitude=_bwd_magnitude(outputs),
        tolerance={n: half_tol for n in outputs},
        args=args,
        grid=lambda p: (ceil_div(p.N, rows), p.H, p.B),
        block=lambda p: 32 * cfg["WARPS"],
        shared_mem=lambda p: bwd_shared_bytes(part, d, cfg),
        options=options,
        cases=[_with(c, d=d, causal=causal) for c in CASES],
        race_check=True,
        race_case="five_tiles_ragged",
        mistakes=_bwd_mistakes(part, causal, rows, fused, cfg["TILE"]),
        nan_causes=BACKWARD_NAN,
        zeroed=("dQ",) if fused else (),
        # the two-kernel build is handed a dQ it must leave alone: a poisoned array nobody reads
        scratch={"dQ": lambda p: ((p.B, p.H, p.N, p.d), F32)} if part == "dkdv" and not fused else {},
        io_check=io_check,
        io_case="five_tiles_ragged" if io_check else None,
    )
    return exercise(**row) if register else Exercise(**row)


# The graded builds of each backward kernel: d = 64 with and without the mask, and bf16 causal d = 128;
# the same three of the dK/dV kernel with dQ fused in.
for _part, _cfg in (("dkdv", None), ("dq", None), ("dkdv", {"FUSED_DQ": 1})):
    for _dtype, _d, _causal in [("fp16", 64, False), ("fp16", 64, True), ("bf16", 128, True)]:
        bwd_variant(_part, _d, _dtype, _causal, cfg=_cfg)

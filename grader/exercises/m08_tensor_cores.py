"""08_tensor_cores: matmuls on tensor cores (WMMA, then mma.sync with ldmatrix), the scores of
one Q tile, and the FlashAttention-2 forward with S and P kept in mma fragments (in half and in
bfloat16, and causal: -DCAUSAL=1 builds the same kernel with tile skipping and the mask).

Its named mistakes simulate, in float64, what a kernel computes when it gets one of the fragment
layouts of grader/fragments.py wrong, so a check can say which one; those modules 09 to 11 use too
live in shared.py.
"""
import numpy as np

from .. import benchspec
from .. import reference as ref
from ..arrays import BF16, bf16_bits, bf16_values
from ..exercise_rows import PRODUCT_NAN, Mistake, case, exercise, hidden
from ..launch import ceil_div
from .shared import C_ROWS, C_ROWS_SWAPPED, K_MATRICES, KEY_FROM_G, Q_MATRICES, V_MATRICES, WARP_ROWS, as_f64, \
    blocks8_transposed, c_rows_halves_swapped, c_rows_paired, extreme_scores, forward_magnitude, forward_mistakes, \
    forward_with_mask, half_accumulation, k_step_mistakes, key_from_g_forward, matmul_ref, matrices_crossed, \
    operands_crossed, pad_to, tile_skipping_io

MODULE = "08_tensor_cores"
F16, F32 = np.float16, np.float32
TILE = 64  # mma_matmul's block tile (64 x 64 of C), and the Q and K/V tiles of the attention kernels


# --------------------------------------------------------------------------- matmuls


def _ab(p, rng):
    return dict(A=rng.standard_normal((p.M, p.K)).astype(F16), B=rng.standard_normal((p.K, p.N)).astype(F16))


def matmul_magnitude(p, x):
    """The size of the terms behind each C[i, j]: sum_k |A_ik B_kj| (an fp32 accumulation's error
    scales with it, not with |C|, which cancellation can make small)."""
    return dict(C=ref.matmul(np.abs(x["A"].astype(np.float64)), np.abs(x["B"].astype(np.float64))))


MATMUL_SIGNATURE = "{}(const __half* A, const __half* B, float* C, int M, int N, int K)"
# What every half-precision matmul row has in common: A and B in, float C out, the float64 product.
HALF_MATMUL_IO = dict(
    make_inputs=_ab,
    outputs=dict(C=lambda p: ((p.M, p.N), F32)),
    reference=matmul_ref,
    magnitude=matmul_magnitude,
    args=lambda p, a: (a.A, a.B, a.C, np.int32(p.M), np.int32(p.N), np.int32(p.K)),
)

exercise(
    id="wmma_matmul",
    hidden_sizes={"M": 16, "N": 16, "K": 16},
    module=MODULE,
    nan_causes=PRODUCT_NAN,
    kernel="wmma_matmul",
    signature=MATMUL_SIGNATURE.format("wmma_matmul"),
    launch_shape="grid = (ceil_div(N, 32), ceil_div(M, 32)), block = 128 (4 warps): warp w computes the 16 x 16 tile "
    "(w / 2, w % 2) of the block's 32 x 32 tile of C with nvcuda::wmma fragments (half in, float accumulator); "
    "M, N, K are multiples of 16",
    **HALF_MATMUL_IO,
    grid=lambda p: (ceil_div(p.N, 32), ceil_div(p.M, 32)),
    block=lambda p: 128,
    cases=[
        case("one_tile", M=16, N=16, K=16, seed=1),
        case("one_block", M=32, N=32, K=64, seed=2),
        case("partial_blocks", M=48, N=80, K=32, seed=3),
        case("long_k", M=16, N=48, K=256, seed=4),
        hidden("rectangular", M=112, N=48, K=96),
        hidden("wide", M=32, N=160, K=48),
    ],
    mistakes=[
        *k_step_mistakes(16),
        Mistake("B read as column-major",
                "B is stored row-major (a row holds consecutive columns): declare matrix_b with wmma::row_major and "
                "leading dimension N. With col_major every 16 x 16 tile of B is read transposed.",
                lambda p, x: dict(C=ref.matmul(x["A"], as_f64(x["B"]).reshape(p.K // 16, 16, p.N // 16, 16)
                                               .swapaxes(1, 3).reshape(p.K, p.N)))),
    ],
)

MMA_CASES = [  # the race check runs on the first case: two steps along K, so a tile is overwritten
    case("two_k_tiles", M=64, N=64, K=64, seed=1),
    case("one_mma", M=16, N=8, K=16, seed=2),
    case("tiny", M=3, N=5, K=7, seed=3),
    case("ragged", M=70, N=50, K=40, seed=4),
    case("long_k", M=32, N=72, K=256, seed=5),
    hidden("sizes_127_129", M=127, N=129, K=100),
    hidden("single_row", M=1, N=96, K=160),
]

exercise(
    id="mma_matmul",
    hidden_sizes={"M": 64, "N": 64, "K": 32},
    module=MODULE,
    nan_causes=PRODUCT_NAN,
    kernel="mma_matmul",
    signature=MATMUL_SIGNATURE.format("mma_matmul"),
    launch_shape=f"grid = (ceil_div(N, {TILE}), ceil_div(M, {TILE})), block = 128 (4 warps): the block stages a "
    f"{TILE} x 32 tile of A and a 32 x {TILE} tile of B in shared memory (zero-filled past the edges) and warp w "
    f"computes rows 16w..16w+15 of the block's {TILE} x {TILE} tile of C with mma_m16n8k16_f16, operands loaded "
    "with ldmatrix; any M, N, K",
    **HALF_MATMUL_IO,
    grid=lambda p: (ceil_div(p.N, TILE), ceil_div(p.M, TILE)),
    block=lambda p: 128,
    cases=MMA_CASES,
    race_check=True,
    race_case="two_k_tiles",
    mistakes=[
        *k_step_mistakes(32),
        Mistake("B loaded without .trans",
                "B is stored k-major (a row of B holds 8 consecutive n), but an mma B register holds two "
                "consecutive k of one column n: load it with ldmatrix_x4_trans. Without .trans every 8 x 8 block "
                "of B is used transposed.",
                lambda p, x: dict(C=ref.matmul(x["A"], blocks8_transposed(as_f64(x["B"]))))),
        Mistake(*C_ROWS, lambda p, x: dict(C=c_rows_paired(ref.matmul(pad_to(as_f64(x["A"]), 0, 16), x["B"]))[:p.M])),
        *operands_crossed(),
        Mistake(*C_ROWS_SWAPPED, lambda p, x: dict(C=c_rows_halves_swapped(ref.matmul(pad_to(as_f64(x["A"]), 0, 16),
                                                                               x["B"]))[:p.M])),
        Mistake("accumulated in half precision",
                "the tensor core adds the products in float: keep the accumulator float (mma_m16n8k16_f16 takes "
                "and returns float c and d) and convert nothing until the final store.",
                lambda p, x: half_accumulation(p, x) if p.K > 16 else None),
    ],
)

# --------------------------------------------------------------------------- Q K^T of one Q tile

QK_D = 64


def _qk_inputs(p, rng):
    return dict(Q=rng.standard_normal((p.N, QK_D)).astype(F16), K=rng.standard_normal((p.N, QK_D)).astype(F16))


def _qk_scale(p):
    return F32(getattr(p, "scale", 1.0 / np.sqrt(QK_D)))


def _scores(q, k, scale):
    return ref.scaled_scores(q, k, float(scale))


exercise(
    id="qk_scores_mma",
    hidden_sizes={"N": 64},
    module=MODULE,
    nan_causes=PRODUCT_NAN,
    kernel="qk_scores_mma",
    signature="qk_scores_mma(const __half* Q, const __half* K, float* S, int N, float scale)",
    launch_shape=f"grid = ceil_div(N, {TILE}), block = 128 (4 warps): block x owns query rows {TILE}x..{TILE}x+{TILE - 1}, "
    f"warp w rows 16w..16w+15 of them (its Q fragments kept in registers); the block walks over the keys in tiles "
    f"of {TILE} staged in shared memory. Q, K [N, {QK_D}] half; S [N, N] float",
    make_inputs=_qk_inputs,
    outputs=dict(S=lambda p: ((p.N, p.N), F32)),
    reference=lambda p, x: dict(S=_scores(x["Q"], x["K"], _qk_scale(p))),
    magnitude=lambda p, x: dict(S=abs(float(_qk_scale(p))) * (np.abs(x["Q"].astype(np.float64))
                                                             @ np.abs(x["K"].astype(np.float64)).T)),
    args=lambda p, a: (a.Q, a.K, a.S, np.int32(p.N), _qk_scale(p)),
    grid=lambda p: ceil_div(p.N, TILE),
    block=lambda p: 128,
    options=(f"-DHEAD_DIM={QK_D}",),
    race_check=True,
    race_case="two_key_tiles",
    cases=[
        case("two_key_tiles", N=128, seed=1),
        case("single_query", N=1, seed=2),
        case("one_tile", N=64, seed=3),
        case("tile_plus_one", N=65, seed=4),
        case("ragged", N=150, seed=5),
        hidden("sizes_191", N=191),
        hidden("custom_scale", N=100, scale=0.3),
    ],
    mistakes=[
        Mistake("scale never applied", "multiply each score by scale once.",
                lambda p, x: dict(S=_scores(x["Q"], x["K"], 1.0))),
        Mistake("scale applied twice", "multiply each score by scale once"
                " (at the default scale 1/sqrt(d) the same numbers come from dividing by d instead of sqrt(d)).",
                lambda p, x: dict(S=_scores(x["Q"], x["K"], _qk_scale(p) ** 2))),
        Mistake("K loaded with .trans",
                "for S = Q K^T the B operand is K^T, and column n of K^T is row n of K: a row of K already holds "
                "consecutive k, so the plain ldmatrix_x4 gives the B fragment. With .trans every 8 x 8 block of K "
                "is used transposed.",
                lambda p, x: dict(S=_scores(x["Q"], blocks8_transposed(as_f64(x["K"])), _qk_scale(p)))),
        Mistake(*C_ROWS, lambda p, x: dict(S=c_rows_paired(_scores(pad_to(as_f64(x["Q"]), 0, 16), x["K"], _qk_scale(p)))[:p.N])),
        Mistake(*K_MATRICES, lambda p, x: dict(S=_scores(x["Q"], matrices_crossed(as_f64(x["K"])), _qk_scale(p)))),
        Mistake(*Q_MATRICES, lambda p, x: dict(S=_scores(matrices_crossed(as_f64(x["Q"])), x["K"], _qk_scale(p)))),
    ],
)

# --------------------------------------------------------------------------- the flash forward


def _flash_draw(p, rng):
    """Q, K, V in float64 [B, H, N, d]; ``spread`` scales Q (large logits), ``rising`` makes
    later keys score higher; ``steep=X``: every query's score grows by about X (times its
    q[..., 0], between 1 and 4) from one key to the next; ``v_offset`` shifts V, as qkv does."""
    shape = (p.B, p.H, p.N, p.d)
    q = rng.standard_normal(shape) * getattr(p, "spread", 1.0)
    k, v = rng.standard_normal(shape), rng.standard_normal(shape)
    if getattr(p, "rising", False) or getattr(p, "steep", 0):
        q[..., 0] = np.abs(q[..., 0]) + 1.0
    if getattr(p, "rising", False):  # later keys score higher: the running max grows tile after tile
        k[..., 0] += np.linspace(0.0, 6.0, p.N)
    if getattr(p, "steep", 0):  # a causal row's later keys (the masked ones) score far above its own
        k[..., 0] += np.arange(p.N) * (p.steep / float(_flash_scale(p)))
    extreme_scores(p, q, k)
    v += getattr(p, "v_offset", 0.0)  # as qkv
    return dict(Q=q, K=k, V=v)


def _flash_inputs(p, rng):
    return {name: v.astype(F16) for name, v in _flash_draw(p, rng).items()}


def _flash_scale(p):
    return F32(getattr(p, "scale", 1.0 / np.sqrt(p.d)))


def _half_bits_as_bf16(a):
    """Values rounded to fp16 whose 16 bits are then read as a bfloat16."""
    bits = np.asarray(a, np.float64).astype(np.float16).view(np.uint16)
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def _tc_forward(p, x, *, quad_max=True, quad_sum=True, p_swapped=False, v_transposed=False, rows_paired=False,
                alpha_rows_swapped=False, alpha_by_column=False, k_transposed=False, k_swapped=False,
                q_swapped=False, v_swapped=False, p_bits_as_bf16=False,
                acc_half=False):
    """The forward as the tensor-core kernel computes it, in float64, tile of 64 keys by tile
    (causal when ``p.causal``: a block walks up to the tile holding its last row, and keys past a
    row are masked), with switches for its fragment mistakes:

    * ``quad_max=False``: the row max is never reduced across the quad, so each of the 4 lanes
      holding a row (lane t holds keys with (key % 8) / 2 == t) keeps its own running max, its
      own rescale factor (applied to the output columns c it holds, (c % 8) / 2 == t) and its own
      share of l; P V still adds every lane's p.
    * ``quad_sum=False``: the final row sum is not reduced across the quad: output column c is
      divided by the share of l of the lane holding it; L (written by lane t = 0) uses lane 0's.
    * ``p_swapped``: P packed as {p0p1, p4p5, p2p3, p6p7}: in every 16 x 16 block of P the
      top-right and bottom-left 8 x 8 quadrants trade places.
    * ``v_transposed``: V read without .trans: every 8 x 8 block of V used transposed.
    * ``rows_paired``: O and L stored to the rows of :func:`c_rows_paired` (and, causal, masked
      as those rows: the kernel's row index is wrong for both).
    * ``alpha_rows_swapped``: the accumulator of row g rescaled with row g + 8's factor and the
      reverse (alpha[1 - e / 2] on the output fragment), l with its own.
    * ``alpha_by_column``: the output fragment rescaled with alpha[e % 2]: float e (row g + 8 * (e / 2),
      column 2t + e % 2) takes its own row's factor only where e / 2 == e % 2, the other row's elsewhere.
    * ``k_transposed``: K read with .trans: every 8 x 8 block of K used transposed in the scores.
    * ``k_swapped``, ``q_swapped``, ``v_swapped``: K's, Q's or V's fragments loaded with the ldmatrix
      matrices crossed (:func:`matrices_crossed`).
    * ``p_bits_as_bf16``: P packed as fp16 bits that the bfloat16 mma reads as bfloat16 (l is summed
      from the float p, right).
    * ``acc_half``: the output accumulator rounded to half after each mma (16 keys): it overflows once
      it passes 65504.
    """
    scale = float(_flash_scale(p))
    q = pad_to(as_f64(x["Q"]), -2, TILE)  # query rows past N are zeros in the kernel's Q tile
    k, v = pad_to(as_f64(x["K"]), -2, TILE), pad_to(as_f64(x["V"]), -2, TILE)
    if v_transposed:
        v = blocks8_transposed(v)
    if k_transposed:
        k = blocks8_transposed(k)
    if k_swapped:
        k = matrices_crossed(k)
    if q_swapped:
        q = matrices_crossed(q)
    if v_swapped:
        v = matrices_crossed(v)
    nk = k.shape[-2]
    lane_of_key = (np.arange(TILE) % 8) // 2
    lane_of_col = (np.arange(p.d) % 8) // 2
    rows = q.shape[:-1]
    m = np.full(rows + (4,), -np.inf)  # per row, per lane of the quad
    ell = np.zeros(rows + (4,))
    acc = np.zeros(q.shape)
    causal, query = getattr(p, "causal", False), np.arange(q.shape[-2])
    row_index = query // WARP_ROWS * WARP_ROWS + query % 8 * 2 + query % WARP_ROWS // 8 if rows_paired else query
    for start in range(0, nk, TILE):
        s = scale * (q @ np.swapaxes(k[..., start:start + TILE, :], -1, -2))
        s[..., np.arange(start, start + TILE) >= p.N] = -np.inf
        if causal:  # padding rows past N too: the kernel masks by row index
            s[..., np.arange(start, start + TILE)[None, :] > row_index[:, None]] = -np.inf
        per_lane = np.stack([s[..., lane_of_key == t].max(axis=-1) for t in range(4)], axis=-1)
        tile_max = per_lane if not quad_max else np.repeat(per_lane.max(axis=-1, keepdims=True), 4, axis=-1)
        if quad_max == "pairs":  # only the xor-1 shuffle: lanes t and t ^ 1 share a max
            tile_max = np.repeat(per_lane.reshape(*per_lane.shape[:-1], 2, 2).max(axis=-1), 2, axis=-1)
        m_new = np.maximum(m, tile_max)
        base = np.where(np.isneginf(m_new), 0.0, m_new)
        alpha = np.exp(m - base)
        probs = np.exp(s - base[..., lane_of_key])
        ell_new = alpha * ell + np.stack([probs[..., lane_of_key == t].sum(axis=-1) for t in range(4)], axis=-1)
        if p_swapped:  # row = 16a + 8h + g, key = 16b + 8e + c: quadrant (h, e) takes (e, h)
            sh = probs.shape
            probs = probs.reshape(*sh[:-2], sh[-2] // 16, 2, 8, TILE // 16, 2, 8)
            probs = probs.swapaxes(-5, -2).reshape(sh)
        if p_bits_as_bf16:
            probs = _half_bits_as_bf16(probs)
        partner = alpha[..., (query // 16 * 16 + (query % 16 + 8) % 16)[:alpha.shape[-2]], :]
        alpha_acc = (partner if alpha_rows_swapped else alpha)[..., lane_of_col]
        if alpha_by_column:  # own row's factor where the column's parity equals the row's half (e / 2 == e % 2)
            own = (query % 16 // 8)[:, None] == (np.arange(p.d) % 2)[None, :]
            alpha_acc = np.where(own, alpha_acc, partner[..., lane_of_col])
        if acc_half:  # one mma (16 keys) at a time, each sum rounded to half
            acc_new = alpha_acc * acc
            with np.errstate(over="ignore", invalid="ignore"):
                for c0 in range(0, TILE, 16):
                    acc_new = (acc_new + probs[..., c0:c0 + 16] @ v[..., start + c0:start + c0 + 16, :]
                               ).astype(np.float16).astype(np.float64)
        else:
            acc_new = alpha_acc * acc + probs @ v[..., start:start + TILE, :]
        # Causal: tiles past a block's own are never visited (for a lane that has seen no key yet,
        # a visit would not be a no-op: alpha = exp(-inf - 0) = 0 clears its share of the output).
        visits = (query // TILE >= start // TILE)[:, None] if causal else True
        m, ell, acc = np.where(visits, m_new, m), np.where(visits, ell_new, ell), np.where(visits, acc_new, acc)
    total = ell.sum(axis=-1, keepdims=True)
    l_col = total if quad_sum else ell[..., lane_of_col]
    if quad_sum == "pairs":  # only the xor-1 shuffle: lanes t and t ^ 1 share a sum
        l_col = (ell + ell[..., [1, 0, 3, 2]])[..., lane_of_col]
    l_first = total[..., 0] if quad_sum else ell[..., 0]
    if quad_sum == "pairs":
        l_first = ell[..., 0] + ell[..., 1]
    with np.errstate(divide="ignore"):
        o = acc / l_col
        lse = m[..., 0] + np.log(l_first)
    if rows_paired:
        o, lse = c_rows_paired(o), c_rows_paired(lse[..., None])[..., 0]
    return dict(O=o[..., :p.N, :], L=lse[..., :p.N])


FLASH_MISTAKES = [
    Mistake("row max not reduced across the quad",
            "a row's scores of a 64-key tile sit in the 4 lanes of a quad (lanes 4g .. 4g + 3): after each lane's "
            "own max, take fmaxf with __shfl_xor_sync(FULL_MASK, v, 1) and then with offset 2, so all four use "
            "one max for p, the rescale factor and L.",
            lambda p, x: _tc_forward(p, x, quad_max=False)),
    Mistake("row max not reduced across the quad",
            "a row's scores of a 64-key tile sit in the 4 lanes of a quad (lanes 4g .. 4g + 3): after each lane's "
            "own max, take fmaxf with __shfl_xor_sync(FULL_MASK, v, 1) and then with offset 2, so all four use "
            "one max for p, the rescale factor and L.",
            lambda p, x: _tc_forward(p, x, quad_max="pairs")),
    Mistake("row sum not reduced across the quad",
            "each lane adds up only the p of its own columns: before dividing, add the quad's four shares with "
            "__shfl_xor_sync(FULL_MASK, l, 1) and offset 2.",
            lambda p, x: _tc_forward(p, x, quad_sum=False)),
    Mistake("row sum not reduced across the quad",
            "each lane adds up only the p of its own columns: before dividing, add the quad's four shares with "
            "__shfl_xor_sync(FULL_MASK, l, 1) and offset 2.",
            lambda p, x: _tc_forward(p, x, quad_sum="pairs")),
    Mistake("P packed in the wrong register order",
            "the A fragment of P for keys 16kk..16kk+15 is {row g keys 0-7, row g + 8 keys 0-7, row g keys 8-15, "
            "row g + 8 keys 8-15}: pack(p[0], p[1]), pack(p[2], p[3]) from s[2kk] first, then pack(p[4], p[5]), "
            "pack(p[6], p[7]) from s[2kk + 1].",
            lambda p, x: _tc_forward(p, x, p_swapped=True) if p.N > 8 else None),
    Mistake("V loaded without .trans",
            "V is stored key-major (a row holds consecutive d), but the B operand of P V needs two consecutive "
            "keys of one column d in a register: load V with ldmatrix_x4_trans.",
            lambda p, x: dict(O=_tc_forward(p, x, v_transposed=True)["O"])),
    Mistake("K loaded with .trans",
            "for S = Q K^T the B operand is K^T, and column n of K^T is row n of K: a row of K already holds "
            "consecutive d, so the plain ldmatrix_x4 gives the B fragment (V, key-major for P V, is the one that "
            "needs .trans). With .trans every 8 x 8 block of K is used transposed.",
            lambda p, x: _tc_forward(p, x, k_transposed=True)),
    Mistake(*K_MATRICES, lambda p, x: _tc_forward(p, x, k_swapped=True)),
    Mistake(*Q_MATRICES, lambda p, x: _tc_forward(p, x, q_swapped=True)),
    Mistake(*V_MATRICES, lambda p, x: dict(O=_tc_forward(p, x, v_swapped=True)["O"])),
    Mistake("output rescaled with alpha[e % 2]",
            "output fragment float e belongs to row g + 8 * (e / 2) and column 2t + e % 2: multiply o[n][e] by "
            "alpha[e / 2], its row's factor; e % 2 picks by column, which gives half the floats the other row's.",
            lambda p, x: dict(O=_tc_forward(p, x, alpha_by_column=True)["O"]) if p.N > TILE else None),
    Mistake(C_ROWS[0], C_ROWS[1] + " Here that is the row each lane writes of O and L.",
            lambda p, x: _tc_forward(p, x, rows_paired=True)),
    Mistake("accumulated in half precision",
            "the tensor core adds the products in float: keep the output accumulator float (the mma takes and "
            "returns float c and d) and round to half only in the final store; a half accumulator overflows past "
            "65504 and loses digits long before.",
            lambda p, x: _tc_forward(p, x, acc_half=True) if getattr(p, "v_offset", 0) else None),
    Mistake("output rescaled with the other row's factor",
            "output fragment float e belongs to row g + 8 * (e / 2), like the scores: multiply o[n][e] by "
            "alpha[e / 2], the factor of its own row, not alpha[1 - e / 2].",
            lambda p, x: dict(O=_tc_forward(p, x, alpha_rows_swapped=True)["O"]) if p.N > TILE else None),
]


FLASH_CASES = [  # the race check runs on the first case: two key tiles, so the second load overwrites the first
    case("two_tiles", B=1, H=1, N=128, seed=1),
    case("single_query", B=1, H=1, N=1, seed=2),
    case("tile_plus_one", B=1, H=2, N=65, seed=3),
    case("rising_max", B=1, H=1, N=200, rising=True, seed=4),
    case("large_logits", B=1, H=1, N=100, spread=8.0, seed=5),
    case("batches_and_heads", B=2, H=2, N=70, seed=6),
    # extreme but legal logits, as module 04's: every score near -150 (a max that starts at 0 underflows
    # every exp), the first tile's keys 100 above the rest (the running max, not the tile's), a scale
    # that is not 1/sqrt(d)
    case("scores_below_minus_87", B=1, H=1, N=150, negative=150.0, seed=7),
    case("falling_max", B=1, H=1, N=200, falling=100.0, seed=8),
    case("other_scale", B=1, H=1, N=96, scale=0.3, seed=9),
    # every p = 1 and every value about 300, as module 07's: the output accumulator reaches about
    # 256 * 300, past half's 65504 (an accumulator rounded to half overflows; the mma adds in float)
    case("uniform_large_values", B=1, H=1, N=256, spread=0.0, v_offset=300.0, seed=10),
    hidden("sizes_127", B=1, H=2, N=127),
    hidden("sizes_191_rising", B=1, H=1, N=191, rising=True),
    hidden("custom_scale_ragged", B=1, H=1, N=127, scale=0.2),
]

# -DCAUSAL=1. The race check runs on the first case too: block 1 loads a second key tile over the
# first. The io check counts the K and V bytes of five query blocks (1 + 2 + ... + 5 tiles, not 5 x 5).
CAUSAL_CASES = [
    case("two_tiles", B=1, H=1, N=128, seed=1),
    case("single_query", B=1, H=1, N=1, seed=2),
    case("tile_plus_one", B=1, H=2, N=65, seed=3),
    case("five_query_blocks", B=1, H=1, N=300, seed=4),
    case("steep_rise", B=1, H=1, N=130, steep=0.25, seed=5),
    case("batches_and_heads", B=2, H=2, N=70, seed=6),
    case("custom_scale", B=1, H=1, N=100, scale=0.3, seed=7),
    case("scores_below_minus_87", B=1, H=1, N=150, negative=150.0, seed=8),
    hidden("sizes_191_rising", B=1, H=1, N=191, rising=True),
    hidden("heads_127", B=1, H=3, N=127),
    hidden("large_logits", B=1, H=1, N=150, spread=8.0),
]


def _flash_magnitude(p, x):
    return forward_magnitude({n: np.asarray(x[n], np.float32) for n in "QKV"}, float(_flash_scale(p)),
                             causal=getattr(p, "causal", False))


def _flash_ref(p, x):
    o, lse = ref.attention_forward(x["Q"], x["K"], x["V"], causal=getattr(p, "causal", False),
                                   scale=float(_flash_scale(p)))
    return dict(O=o, L=lse)


def _masked(p, x, keep):
    """(O, L) where query i sees the keys j with ``keep[i, j]`` ([N, N])."""
    o, lse = forward_with_mask(x, float(_flash_scale(p)), keep[None, None])
    return dict(O=o, L=lse)


def _ij(p):
    """([N, 1] query rows, [1, N] keys)."""
    return np.arange(p.N)[:, None], np.arange(p.N)[None, :]


def _causal_keep(p, x):
    i, j = _ij(p)
    return (j <= i)[None, None]


def _max_over_masked_keys(p, x, round_p):
    """The causal forward of a kernel that takes each tile's row max before the causal mask, in
    float64 tile by tile: a row's max includes the scores of the keys past it in its diagonal
    tile; the visible keys' p = exp(s - m) enter l as float32 and P V rounded as the kernel packs
    them (``round_p``). Where a masked key scores far above the row's own, those p underflow in
    half and the diagonal tile adds nothing to O, while l (float) still counts them."""
    scale = float(_flash_scale(p))
    q, k, v = (as_f64(x[n]) for n in "QKV")
    i, j = _ij(p)
    s = scale * (q @ np.swapaxes(k, -1, -2))
    m = np.full(s.shape[:-1], -np.inf)
    ell = np.zeros(s.shape[:-1])
    acc = np.zeros(q.shape)
    for start in range(0, p.N, TILE):
        visits = (i[:, 0] // TILE >= start // TILE)  # a block walks up to the tile holding its rows
        tile = slice(start, start + TILE)
        m_new = np.where(visits, np.maximum(m, s[..., tile].max(axis=-1)), m)
        alpha = np.exp(m - m_new)  # -inf - finite: 0, the first tile
        with np.errstate(under="ignore"):
            probs = np.where(j[:, tile] <= i, np.exp(s[..., tile] - m_new[..., None]), 0.0).astype(F32)
        probs = np.where(visits[:, None], probs, 0.0)
        ell = alpha * ell + probs.sum(axis=-1, dtype=np.float64)
        acc = alpha[..., None] * acc + round_p(probs) @ v[..., tile, :]
        m = m_new
    return dict(O=acc / ell[..., None], L=m + np.log(ell))


# The mask runs in every tile a block visits (the tiles up to its own when causal).
KEY_FROM_G_MISTAKE = Mistake(*KEY_FROM_G, lambda p, x: dict(zip("OL", key_from_g_forward(
    x, float(_flash_scale(p)), p.N, TILE, getattr(p, "causal", False),
    lambda i, start: (start <= i // TILE * TILE) if getattr(p, "causal", False) else True, lambda i, start: True))))


def _causal_mistakes(round_p):
    """What a causal build gets wrong about the mask and the tiles it walks (``round_p``: P as packed)."""
    def keep(rule):
        return lambda p, x: _masked(p, x, rule(*_ij(p)))

    return [
        Mistake("no causal mask", "with -DCAUSAL=1 query i sees keys 0..i only: stop the walk over key tiles after the "
                "tile that holds the block's last row, and set the scores of keys past the row to -INFINITY.",
                keep(lambda i, j: np.ones((i.size, j.size), bool))),
        Mistake("diagonal tile not masked", "stopping the walk at the block's own tile leaves out the tiles above the "
                "diagonal, but inside that tile the keys past each row still need -INFINITY (keep key <= row[e / 2]).",
                keep(lambda i, j: j // TILE <= i // TILE)),
        Mistake("mask off by one on the diagonal", "query i may attend to key i itself: keep key <= row, not key < row "
                "(with key < row, query 0 sees nothing at all).",
                keep(lambda i, j: j < i)),
        Mistake("diagonal tile skipped", f"the block must visit the tile that holds its own rows (keys q0 .. q0 + "
                f"{TILE - 1}), masked: walk while k0 < min(N, q0 + {TILE}), not k0 < q0 (which leaves the first block "
                "no key at all).",
                keep(lambda i, j: (j <= i) & (j // TILE < i // TILE))),
        Mistake("causal mask compares with the wrong row", "s[n][e] belongs to row g + 8 * (e / 2) of the warp: "
                "compare the key with row[e / 2], not with row g for both of the lane's rows.",
                keep(lambda i, j: j <= i - 8 * (i % WARP_ROWS >= 8))),
        Mistake("row max taken before the causal mask", "set the scores of keys past the row to -INFINITY before the "
                "row max: a max that includes them (here later keys score far above the row's own) makes "
                "p = exp2(s - m) of the visible keys underflow when P is packed to half, so the diagonal tile adds "
                "nothing to O, while l (a float) still counts them.",
                lambda p, x: _max_over_masked_keys(p, x, round_p)),
    ]


def _half(a):
    return a.astype(F16).astype(np.float64)


def _bfloat16(a):
    return bf16_values(bf16_bits(a)).astype(np.float64)


# --------------------------------------------------------------------------- the same kernel in bfloat16
# -DELEM_BF16=1 builds tc_flash_fwd with __nv_bfloat16 tensors and mma_m16n8k16_bf16. NumPy has no
# bfloat16: Q, K, V are passed as their bits (float32 rounded to nearest even), O comes back as
# bits too, and the reference and the mistakes work on the values those bits hold.


def _flash_inputs_bf16(p, rng):
    """The fp16 rows' draws, rounded from float32 to bfloat16 (to nearest even), as bits."""
    return {name: bf16_bits(v.astype(F32)) for name, v in _flash_draw(p, rng).items()}


def _bf16_as_values(x):
    """The inputs' bfloat16 bits as the float32 values they hold."""
    return {name: bf16_values(v) for name, v in x.items()}


def _on_values(m):
    """``m`` (a mistake of the fp16 rows) applied to the values of bfloat16 inputs."""
    return Mistake(m.name, m.explain, lambda p, x, wrong=m.wrong: wrong(p, _bf16_as_values(x)))


P_PACKED_AS_HALF = Mistake(
    "P packed as fp16 in the bfloat16 build",
    "mma_m16n8k16_bf16 reads P's registers as bfloat16: pack p with the element type's conversion "
    "(__floats2bfloat162_rn, or a helper chosen by elem), not __floats2half2_rn; fp16 bits read as bfloat16 "
    "make every p at most 2^-7 of itself, while l, summed from the floats, stays right.",
    lambda p, x: _tc_forward(p, x, p_bits_as_bf16=True))

BF16_FLASH_MISTAKES = [_on_values(m) for m in FLASH_MISTAKES + [P_PACKED_AS_HALF] + forward_mistakes(Mistake, TILE)]


def _flash_exercise(head_dim, bf16=False, causal=False):
    """tc_flash_fwd graded in one build (head dimension, element type, causal or not), with the
    benchmark `python -m grader bench` runs for it."""
    ex_id = "tc_flash_fwd_" + ("bf16_" if bf16 else "") + ("causal_" if causal else "") + f"d{head_dim}"
    options = (f"-DHEAD_DIM={head_dim}",) + (("-DELEM_BF16=1",) if bf16 else ()) + (("-DCAUSAL=1",) if causal else ())
    if causal:
        mistakes = _causal_mistakes(_bfloat16 if bf16 else _half) + FLASH_MISTAKES + forward_mistakes(
            Mistake, TILE, keep=_causal_keep)
        if bf16:
            mistakes = [_on_values(m) for m in mistakes + [P_PACKED_AS_HALF]]
    else:
        mistakes = BF16_FLASH_MISTAKES if bf16 else FLASH_MISTAKES + forward_mistakes(Mistake, TILE)
    mistakes = mistakes + [_on_values(KEY_FROM_G_MISTAKE) if bf16 else KEY_FROM_G_MISTAKE]
    elem = "__nv_bfloat16" if bf16 else "__half"
    if bf16 or causal:
        launch_shape = (f"compiled with {' '.join(options)} (elem = {elem}); grid = (ceil_div(N, {TILE}), H, B), "
                        f"block = 128 (4 warps): as tc_flash_fwd_d{head_dim}"
                        + (", with bfloat16 tensors and mma_m16n8k16_bf16" if bf16 else "")
                        + (f"; query row i sees keys 0..i: block x walks over the key tiles up to the one holding its "
                           f"last row, {TILE}x + {TILE - 1} (tiles above the diagonal are never loaded), and sets the "
                           "scores of keys past the row to -INFINITY before the row max" if causal else "")
                        + f"; Q, K, V, O [B, H, N, d] {'bfloat16 (passed as uint16 bits)' if bf16 else 'half'}, "
                        "L [B, H, N] float")
    else:
        launch_shape = (f"compiled with -DHEAD_DIM={head_dim} (elem = __half); grid = (ceil_div(N, {TILE}), H, B), "
                        f"block = 128 (4 warps): block x owns query rows {TILE}x..{TILE}x+{TILE - 1} of head "
                        f"(blockIdx.z, blockIdx.y), warp w 16 of them; K/V tiles of {TILE} keys in static shared "
                        "memory; S, P and the output accumulator stay in mma fragments; Q, K, V, O [B, H, N, d] half, "
                        "L [B, H, N] float (natural-log logsumexp)")
    extra = dict(d=head_dim, causal=True) if causal else dict(d=head_dim)
    exercise(
        id=ex_id,
        hidden_sizes={"N": 64},
        module=MODULE,
        kernel="tc_flash_fwd",
        signature="tc_flash_fwd(const elem* Q, const elem* K, const elem* V, elem* O, float* L, int N, float scale)",
        launch_shape=launch_shape,
        make_inputs=_flash_inputs_bf16 if bf16 else _flash_inputs,
        outputs=dict(O=lambda p: ((p.B, p.H, p.N, p.d), BF16 if bf16 else F16), L=lambda p: ((p.B, p.H, p.N), F32)),
        reference=(lambda p, x: _flash_ref(p, _bf16_as_values(x))) if bf16 else _flash_ref,
        magnitude=(lambda p, x: _flash_magnitude(p, _bf16_as_values(x))) if bf16 else _flash_magnitude,
        args=lambda p, a: (a.Q, a.K, a.V, a.O, a.L, np.int32(p.N), _flash_scale(p)),
        grid=lambda p: (ceil_div(p.N, TILE), p.H, p.B),
        block=lambda p: 128,
        options=options,
        cases=[case(c.name, c.seed, **c.params, **extra) if not c.hidden else hidden(c.name, **c.params, **extra)
               for c in (CAUSAL_CASES if causal else FLASH_CASES)],
        race_check=True,
        race_case="two_tiles",
        mistakes=mistakes,
        io_check=tile_skipping_io(TILE, TILE, 2) if causal else None,
        io_case="five_query_blocks" if causal else None,
    )
    benchspec.SPECS[ex_id] = benchspec.forward_spec(ex_id, d=head_dim, causal=causal)


for _bf16 in (False, True):
    for _causal in (False, True):
        for _d in (64, 128):
            _flash_exercise(_d, _bf16, _causal)

# What `python -m grader bench` times the matmuls against: cuBLAS at 4096^3, half in, float out.
for _id in ("wmma_matmul", "mma_matmul"):
    benchspec.SPECS[_id] = benchspec.BenchSpec(
        _id, "matmul", benchspec.MATMUL_SHAPE, lambda p: 2.0 * p.M * p.N * p.K,
        lambda p, e: e * (p.M * p.K + p.K * p.N) + 4 * p.M * p.N, baseline="cublas")

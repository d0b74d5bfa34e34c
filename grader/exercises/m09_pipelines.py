"""09_pipelines: module 08's tensor-core forward with its K/V tiles copied by cp.async while the
previous tile is multiplied (a pipeline of STAGES shared buffers, 128 query rows per block),
then the same kernel with unpadded rows laid out by an XOR swizzle (graded on bank conflicts).

Both kernels take their shape at compile time: -DHEAD_DIM (64 or 128), -DELEM_BF16, -DCAUSAL,
-DBLOCK_ROWS (query rows per block, 16 per warp) and -DSTAGES (K/V buffers). The exercise rows fix
BLOCK_ROWS and STAGES to the values below; ``grader.autotune`` varies them.
"""
import numpy as np

from .. import benchspec
from .. import reference as ref
from ..arrays import BF16, bf16_bits, bf16_values
from ..device import H100_SXM
from ..exercise_rows import PRODUCT_NAN, Exercise, Mistake, Space, case, exercise, hidden, register_space
from ..launch import ceil_div
from .m07_memory_and_precision import bank_conflict_check
from .m08_tensor_cores import FLASH_MISTAKES, HALF_MATMUL_IO, MATMUL_SIGNATURE
from .shared import C_ROWS, C_ROWS_SWAPPED, KEY_FROM_G, blocks8_transposed, c_rows_halves_swapped, c_rows_paired, \
    forward_magnitude, forward_mistakes, forward_with_mask, half_accumulation, k_step_mistakes, key_from_g_forward, \
    matmul_ref, operands_crossed, qkv, scale_of, tile_skipping_io

MODULE = "09_pipelines"
F16, F32 = np.float16, np.float32
TILE = 64  # keys per K/V tile
BLOCK_ROWS = 128  # query rows per block in the exercise rows: 8 warps of 16
STAGES = 2  # K/V buffers in the exercise rows: tile j computed while tile j + 1 is copied


# --------------------------------------------------------------------------- 1. the pipelined matmul

GEMM_BM, GEMM_BN, GEMM_BK, GEMM_STAGES = 128, 128, 32, 3
GEMM_WARPS = (2, 2)  # along M and N: each warp owns a 64 x 64 tile of C
# The second graded build: every loop bound and stage index must come from the macros (a kernel with
# 4, 8 or 2 written in passes the default build and fails the tuner's): 4 x 2 warps of 32 x 64, K steps
# of 64 (four slices each), two stages (cp_async_wait<0>).
GEMM_OTHER = dict(WARPS_M=4, WARPS_N=2, BK=64, STAGES=2)


def _steps_shifted(p, x, bk=GEMM_BK, stages=GEMM_STAGES):
    """C of a pipeline that copies step s's K slice (not step s + STAGES - 1's) into the stage it
    refills: the prologue's steps are right, every later step multiplies the slice STAGES - 1 before it."""
    a, b = (np.asarray(x[n], np.float64) for n in "AB")
    steps = ceil_div(p.K, bk)
    c = np.zeros((p.M, p.N))
    for t in range(steps):
        k0 = (t if t < stages - 1 else t - (stages - 1)) * bk
        c += a[:, k0:k0 + bk] @ b[k0:k0 + bk]
    return dict(C=c)


def _slices_one_ahead(p, x, bk=GEMM_BK):
    """C of a kernel whose mmas read the fragment set the next slice was just loaded into: the 16-deep
    slice n is multiplied as slice n + 1, and the last one, whose next load is skipped, as slice n - 1."""
    a, b = (np.asarray(x[n], np.float64) for n in "AB")
    total = ceil_div(p.K, bk) * (bk // 16)

    def product(n):  # slices past K are the zero-filled ones
        return a[:, 16 * n:16 * n + 16] @ b[16 * n:16 * n + 16]

    return dict(C=sum(product(n + 1) for n in range(total - 1)) + product(max(total - 2, 0)))


def gemm_shared_bytes(stages=GEMM_STAGES, bm=GEMM_BM, bn=GEMM_BN, bk=GEMM_BK):
    """``stages`` pairs of an A tile (BM x BK) and a B tile (BK x BN), rows padded by 8 halves."""
    return stages * (bm * (bk + 8) + bk * (bn + 8)) * 2


def _gemm_exercise(ex_id, cases, race_case, warps_m=GEMM_WARPS[0], warps_n=GEMM_WARPS[1], bk=GEMM_BK,
                   stages=GEMM_STAGES):
    """The matmul's row for one build (the defaults: the kernel's own macro values)."""
    options = tuple(f"-D{k}={v}" for k, v, default in (("WARPS_M", warps_m, GEMM_WARPS[0]),
                    ("WARPS_N", warps_n, GEMM_WARPS[1]), ("BK", bk, GEMM_BK), ("STAGES", stages, GEMM_STAGES))
                    if v != default)
    wm, wn, threads = GEMM_BM // warps_m, GEMM_BN // warps_n, 32 * warps_m * warps_n
    return exercise(
        id=ex_id,
        hidden_sizes={"M": GEMM_BM, "N": 8, "K": 8},
        module=MODULE,
        nan_causes=PRODUCT_NAN,
        kernel="mma_matmul_pipe",
        signature=MATMUL_SIGNATURE.format("mma_matmul_pipe"),
        launch_shape=(f"compiled with {' '.join(options)}; " if options else "") +
        f"grid = (ceil_div(N, {GEMM_BN}), ceil_div(M, {GEMM_BM})), block = {threads} ({warps_m * warps_n} warps in "
        f"{warps_m} rows of {warps_n}, each owning a {wm} x {wn} tile of the block's {GEMM_BM} x {GEMM_BN} tile of C), "
        f"dynamic shared memory = STAGES * ({GEMM_BM} * (BK + 8) + BK * ({GEMM_BN} + 8)) * 2 bytes with STAGES = "
        f"{stages}, BK = {bk}: A and B tiles of K steps of BK copied with cp.async, STAGES - 1 steps in flight; any M, "
        "and N, K multiples of 8 (rows of 16-byte chunks)",
        **HALF_MATMUL_IO,
        grid=lambda p: (ceil_div(p.N, GEMM_BN), ceil_div(p.M, GEMM_BM)),
        block=lambda p: threads,
        shared_mem=lambda p: gemm_shared_bytes(stages, bk=bk),
        options=options,
        cases=cases,
        race_check=True,
        race_case=race_case,
        mistakes=[
            *k_step_mistakes(bk),
            Mistake("a refill copies the current step's K slice",
                    "the copy issued while step s is multiplied brings step s + STAGES - 1: its K offset is "
                    "(s + STAGES - 1) * BK, the same step whose stage it fills.",
                    lambda p, x: _steps_shifted(p, x, bk, stages) if ceil_div(p.K, bk) >= stages else None),
            Mistake("the mma reads the fragments of the next slice",
                    "slice kk multiplies register set kk % 2; the ldmatrix of slice kk + 1 fill the other set, (kk + 1) % 2.",
                    lambda p, x: _slices_one_ahead(p, x, bk)),
            Mistake("B loaded without .trans",
                    "B is K x N with a row holding consecutive n, but the B fragment needs two consecutive k of one column "
                    "in a register: load it with ldmatrix_x4_trans.",
                    lambda p, x: dict(C=ref.matmul(x["A"], blocks8_transposed(np.asarray(x["B"], np.float64))))),
            *operands_crossed(),
            *([Mistake(f"the slice loop stops after {GEMM_BK // 16} slices, the default build's count",
                       f"with -DBK={bk} a K step holds BK / 16 = {bk // 16} slices: every loop bound, fragment count and "
                       "stage index must come from the macros (BK / 16, WM / 16, WN / 8, STAGES), never from the "
                       "numbers of the default build.",
                       lambda p, x: dict(C=ref.matmul(x["A"][:, np.arange(p.K) % bk < GEMM_BK],
                                                      x["B"][np.arange(p.K) % bk < GEMM_BK])))]
              if bk > GEMM_BK else []),
            Mistake("accumulator in half precision", "accumulate in float registers and convert only the result.",
                    half_accumulation),
            Mistake(*C_ROWS, lambda p, x: dict(C=c_rows_paired(matmul_ref(p, x)["C"]))),
            Mistake(*C_ROWS_SWAPPED, lambda p, x: dict(C=c_rows_halves_swapped(matmul_ref(p, x)["C"]))),
        ],
    )


_gemm_exercise(
    "mma_matmul_pipe",
    cases=[  # the race check runs on the first case: five K steps, so every stage is refilled
        case("five_k_steps", M=128, N=128, K=160, seed=1),
        case("smallest", M=1, N=8, K=8, seed=2),
        case("ragged_edges", M=130, N=136, K=40, seed=3),
        case("two_blocks_each_way", M=200, N=264, K=64, seed=4),
        case("long_k", M=16, N=64, K=512, seed=5),
        hidden("sizes_257_72_328", M=257, N=72, K=328),
        hidden("single_row", M=1, N=256, K=96),
    ],
    race_case="five_k_steps")
GEMM_OTHER_ID = "mma_matmul_pipe_warps4x2_bk64_stages2"
_gemm_exercise(
    GEMM_OTHER_ID,
    cases=[
        case("five_k_steps", M=128, N=128, K=320, seed=11),
        case("ragged_edges", M=130, N=136, K=72, seed=12),
        hidden("sizes_257_72_328", M=257, N=72, K=328),
    ],
    race_case="five_k_steps",
    warps_m=GEMM_OTHER["WARPS_M"], warps_n=GEMM_OTHER["WARPS_N"], bk=GEMM_OTHER["BK"], stages=GEMM_OTHER["STAGES"])
benchspec.SPECS["mma_matmul_pipe"] = benchspec.BenchSpec(
    "mma_matmul_pipe", "matmul", benchspec.MATMUL_SHAPE, lambda p: 2.0 * p.M * p.N * p.K,
    lambda p, e: e * (p.M * p.K + p.K * p.N) + 4 * p.M * p.N, baseline="cublas")


def _gemm_warp_tile(cfg):
    """None, or why a configuration's warp tile does not suit the kernel."""
    wm, wn = cfg["BM"] // cfg["WARPS_M"], cfg["BN"] // cfg["WARPS_N"]
    if wm % 16 or wn % 16:
        return f"a {wm} x {wn} warp tile is not made of 16 x 16 fragments"
    if wm * wn > 64 * 64:  # acc[WM / 16][WN / 8][4]: WM * WN / 32 floats per lane
        return f"a {wm} x {wn} warp tile needs {wm * wn // 32} accumulator registers per lane, over 128"
    # the accumulators and two sets of fragments (4 registers per 16 rows of A and per 16 columns of B),
    # against what an SM's registers give each thread of the block (__launch_bounds__ makes the
    # compiler spill past that rather than refuse the launch)
    threads = 32 * cfg["WARPS_M"] * cfg["WARPS_N"]
    held = wm * wn // 32 + 2 * 4 * (wm // 16 + wn // 16)
    if held > min(H100_SXM.max_registers_per_thread, H100_SXM.registers_per_block // threads):
        return (f"a {wm} x {wn} warp tile holds {held} registers per lane in accumulators and fragments, over the "
                f"{min(H100_SXM.max_registers_per_thread, H100_SXM.registers_per_block // threads)} each of {threads} threads can have")
    return None


# The block tile, the warp grid, the K step and the stages: every macro the kernel reads.
register_space(Space(
    exercise="mma_matmul_pipe",
    params={"BM": (128, 256), "BN": (128, 256), "WARPS_M": (2, 4), "WARPS_N": (2, 4), "BK": (32, 64),
            "STAGES": (2, 3, 4)},
    grid=lambda p, cfg: (ceil_div(p.N, cfg["BN"]), ceil_div(p.M, cfg["BM"])),
    block=lambda p, cfg: 32 * cfg["WARPS_M"] * cfg["WARPS_N"],
    shared_mem=lambda p, cfg: gemm_shared_bytes(cfg["STAGES"], cfg["BM"], cfg["BN"], cfg["BK"]),
    exclude=_gemm_warp_tile,
))

# --------------------------------------------------------------------------- 2. and 3. the flash forward


def shared_bytes(d, block_rows=BLOCK_ROWS, stages=STAGES, pad=0):
    """The Q tile and ``stages`` (K, V) tile pairs of 2-byte elements, each row ``d + pad`` long."""
    return (block_rows + 2 * stages * TILE) * (d + pad) * 2


def _inputs(p, rng):
    return {name: v.astype(F16) for name, v in qkv(p, rng).items()}


def _inputs_bf16(p, rng):
    return {name: bf16_bits(v) for name, v in qkv(p, rng).items()}


def _values(x):
    """Inputs as the float32 values they hold (bfloat16 bits decoded, half widened)."""
    return {name: bf16_values(v) if v.dtype == np.uint16 else v.astype(F32) for name, v in x.items()}


def _keep(p):
    return (np.arange(p.N)[None, :] <= np.arange(p.N)[:, None])[None, None] if p.causal else None


def _reference(p, x):
    o, lse = ref.attention_forward(*(_values(x)[n] for n in "QKV"), causal=p.causal, scale=float(scale_of(p)))
    return dict(O=o, L=lse)


def _magnitude(p, x):
    return forward_magnitude(_values(x), float(scale_of(p)), causal=p.causal)


def _masked(p, x, keep):
    o, lse = forward_with_mask(_values(x), float(scale_of(p)), keep[None, None])
    return dict(O=o, L=lse)


i_, j_ = (lambda n: np.arange(n)[:, None]), (lambda n: np.arange(n)[None, :])


def _warp_last(p):
    """[N, 1]: the last query row of the warp (16 rows) that holds each query i."""
    return i_(p.N) // 16 * 16 + 15


def _block_first(p):
    """[N, 1]: the first query row of the block (BLOCK_ROWS rows) that holds each query i."""
    return i_(p.N) // BLOCK_ROWS * BLOCK_ROWS


def _fragment_row_g(p):
    """[N, 1]: the row a mask reads for query i when it takes row g for all four floats of a C
    fragment: rows g + 8 (the second half of each 16-row group) use the row 8 above."""
    i = i_(p.N)
    return i - 8 * ((i % 16) >= 8)


def _key_from_g_mistake(causal, block_rows):
    """The mask's key index built from g, in this module's walk: a warp skips (causal) the tiles past its
    last row, and masks only the tiles that cross N or (causal) reach past the block's first row."""
    def wrong(p, x):
        def visited(i, start):
            return (start <= i // 16 * 16 + 15) if causal else True

        def masked(i, start):
            return (start + TILE > p.N) | ((start + TILE > i // block_rows * block_rows) if causal else False)

        o, lse = key_from_g_forward(_values(x), float(scale_of(p)), p.N, TILE, causal, visited, masked)
        return dict(O=o, L=lse)
    return Mistake(*KEY_FROM_G, wrong)


CAUSAL_MISTAKES = [
    Mistake("no causal mask", "query i must not see keys j > i: in the tiles that cross the diagonal, set those "
            "scores to -INFINITY before the row max.",
            lambda p, x: _masked(p, x, np.ones((p.N, p.N), bool))),
    Mistake("mask off by one on the diagonal", "query i may attend to key i itself: keep key <= row, not key < row "
            "(with key < row, query 0 sees nothing at all).",
            lambda p, x: _masked(p, x, j_(p.N) < i_(p.N))),
    Mistake("diagonal tile skipped", "a warp may skip a key tile only when the tile's first key lies past the warp's "
            f"last row: skip when j * {TILE} > q0 + 16 * warp + 15, and visit (with the mask) the tile that holds the "
            "diagonal.",
            lambda p, x: _masked(p, x, (j_(p.N) <= i_(p.N)) & (j_(p.N) // TILE * TILE + TILE - 1 <= _warp_last(p)))),
    Mistake("diagonal tiles not masked", "skipping the tiles above the warp's rows is not the whole mask: inside the "
            "tiles that cross the diagonal, keys past the row still need -INFINITY.",
            lambda p, x: _masked(p, x, j_(p.N) // TILE * TILE <= _warp_last(p))),
    Mistake("causal mask only in the last key tile",
            "a tile needs the mask when it crosses N or when it crosses the diagonal (its last key is past the warp's "
            f"first row, (j + 1) * {TILE} > q0 + 16 * warp), not only when it is the last tile.",
            lambda p, x: _masked(p, x, (j_(p.N) // TILE * TILE <= _warp_last(p))
                                 & ((j_(p.N) <= i_(p.N)) | (j_(p.N) // TILE < (p.N - 1) // TILE)))),
    Mistake("causal mask only in the last key tile",
            "a tile needs the mask when it crosses N or when it crosses the diagonal (its last key is past the warp's "
            f"first row, (j + 1) * {TILE} > q0 + 16 * warp), not only when it is the block's last tile: a block of "
            f"{BLOCK_ROWS} rows has its diagonal across {BLOCK_ROWS // TILE} tiles.",
            lambda p, x: _masked(p, x, (j_(p.N) // TILE * TILE <= _warp_last(p))
                                 & ((j_(p.N) <= i_(p.N)) | (j_(p.N) // TILE < (np.minimum(p.N, _block_first(p)
                                                                                         + BLOCK_ROWS) - 1) // TILE)))),
    Mistake("the mask's row taken from the first half of the fragment",
            "a C fragment's floats 0, 1 belong to row g and floats 2, 3 to row g + 8: compare each float's key with "
            "its own row, row[e / 2], not with row g for all four.",
            lambda p, x: _masked(p, x, j_(p.N) <= _fragment_row_g(p))),
    Mistake("key tiles counted for a block of 64 rows",
            f"a block holds BLOCK_ROWS = {BLOCK_ROWS} query rows: it walks the key tiles up to the one holding its "
            f"last row, ceil_div(min(N, q0 + BLOCK_ROWS), {TILE}) of them; counted for 64 rows, the warps past row "
            "q0 + 63 miss their last tiles.",
            lambda p, x: _masked(p, x, (j_(p.N) <= i_(p.N)) & (j_(p.N) < _block_first(p) + 64))),
]


def _swizzle_half_applied(p, x, names="QKV"):
    """Chunks swizzled on one side only (the copies or the ldmatrix reads) for the operands in
    ``names``: every 8-element chunk c of row r is read from chunk c ^ (r % 8) of that row."""
    def unswizzled(a):
        a = _values(dict(a=a))["a"]
        rows = np.arange(a.shape[-2]) % 8
        chunks = np.arange(p.d // 8)[None, :] ^ rows[:, None]  # [rows, chunks]: the chunk actually read
        blocks = a.reshape(*a.shape[:-1], p.d // 8, 8)
        return np.take_along_axis(blocks, np.broadcast_to(chunks[..., None], blocks.shape), axis=-2).reshape(a.shape)

    q, k, v = (unswizzled(x[n]) if n in names else _values(dict(a=x[n]))["a"] for n in "QKV")
    keep = _keep(p)
    o, lse = forward_with_mask(dict(Q=q, K=k, V=v), float(scale_of(p)), keep)
    return dict(O=o, L=lse)


SWIZZLE_MISTAKES = [
    Mistake("swizzle on one side only",
            "the copy into shared memory and the ldmatrix reads must use the same layout: chunk c of row r at "
            "chunk c ^ (r % 8) in both (a row read through the other layout has its 16-byte chunks permuted).",
            _swizzle_half_applied),
    *(Mistake(f"swizzle on one side only, for {n}",
              f"the copy of {n} into shared memory and its ldmatrix reads must use the same layout as the others: "
              f"chunk c of row r at chunk c ^ (r % 8) on the copy and on every ldmatrix of {n} (read through the "
              "other layout, a row has its 16-byte chunks permuted).",
              lambda p, x, n=n: _swizzle_half_applied(p, x, n)) for n in "QKV"),
]

# The race check runs on the first case: three query blocks and five key tiles, so every buffer is
# refilled while other warps may still read it.
CASES = [
    case("five_tiles", B=1, H=1, N=300, seed=1),
    case("single_query", B=1, H=1, N=1, seed=2),
    case("one_block_two_tiles", B=1, H=2, N=128, seed=3),
    case("tile_plus_one", B=1, H=1, N=65, seed=4),
    case("rising_max", B=1, H=1, N=200, rising=True, seed=5),
    case("large_logits", B=1, H=1, N=100, spread=8.0, seed=6),
    case("scores_below_minus_87", B=1, H=1, N=150, negative=150.0, seed=7),
    case("falling_max", B=1, H=1, N=200, falling=100.0, seed=8),
    case("batches_and_heads", B=2, H=2, N=70, seed=9),
    hidden("sizes_257", B=1, H=2, N=257),
    hidden("late_peak", B=1, H=1, N=333, late_peak=12.0),
    hidden("custom_scale", B=1, H=1, N=190, scale=0.3),
    # every p = 1, every value about 300: the output accumulator passes half's 65504 (kept in half, it overflows)
    hidden("uniform_large_values", B=1, H=1, N=256, spread=0.0, v_offset=300.0),
]


def _rows(p_extra):
    return [case(c.name, c.seed, **c.params, **p_extra) if not c.hidden else hidden(c.name, **c.params, **p_extra)
            for c in CASES]


def _args(p, a):
    return (a.Q, a.K, a.V, a.O, a.L, np.int32(p.N), scale_of(p))


_banks_profile = bank_conflict_check(
    lambda p: f"One ldmatrix phase reads 16 bytes from each of 8 consecutive rows; unpadded rows are {2 * p.d} bytes, "
    "a multiple of 128, so all 8 land in the same banks. Store chunk c (8 elements) of row r at chunk c ^ (r % 8), on "
    "the copy and on every ldmatrix.")


KERNELS = {
    "tc_flash_fwd_pipe": dict(
        pad=8,
        what="K/V tiles copied with cp.async into STAGES buffers (rows padded by 8 elements), the copy of tile "
        "j + STAGES - 1 in flight while tile j is multiplied",
        mistakes=[], profile=None),
    "tc_flash_fwd_swizzle": dict(
        pad=0,
        what="as tc_flash_fwd_pipe, with unpadded shared rows laid out by the XOR swizzle (chunk c of row r at "
        "c ^ (r % 8)); the check profiles the shared loads on the emulator",
        mistakes=SWIZZLE_MISTAKES, profile=_banks_profile),
    "tc_flash_fwd_ws": dict(
        pad=8, producer=32,
        what="warp-specialised: the last warp only copies (Q with tile 0, then each K/V tile into stage j % STAGES, "
        "after waiting at named barrier EMPTY(s) = 1 + STAGES + s for the consumers to leave it, then arriving at "
        "FULL(s) = 1 + s once the copy has landed); the other BLOCK_ROWS / 16 warps only compute, waiting at FULL(s) "
        "and arriving at EMPTY(s); every barrier counts all the block's threads",
        mistakes=[], profile=None),
}


def block_threads(kernel, block_rows):
    """Threads per block: 16 query rows per computing warp, and the producer warp where there is one."""
    return 2 * block_rows + KERNELS[kernel].get("producer", 0)


def variant(kernel, d, dtype="fp16", causal=False, stages=STAGES, block_rows=BLOCK_ROWS, register=True):
    """The exercise row of ``kernel`` built with one (d, dtype, causal, STAGES, BLOCK_ROWS): the graded
    rows below, and the other builds the benchmarks time (``register=False``: not added to the course)."""
    spec, bf16 = KERNELS[kernel], dtype == "bf16"
    suffix = ("bf16_" if bf16 else "") + ("causal_" if causal else "") + \
        (f"stages{stages}_" if stages != STAGES else "") + (f"rows{block_rows}_" if block_rows != BLOCK_ROWS else "")
    extra = (("-DELEM_BF16=1",) if bf16 else ()) + (("-DCAUSAL=1",) if causal else ()) + \
        ((f"-DSTAGES={stages}",) if stages != STAGES else ()) + \
        ((f"-DBLOCK_ROWS={block_rows}",) if block_rows != BLOCK_ROWS else ())
    ex_id = f"{kernel}_{suffix}d{d}"
    elem = "__nv_bfloat16" if bf16 else "__half"
    mistakes = (CAUSAL_MISTAKES if causal else []) + list(FLASH_MISTAKES) + spec["mistakes"] + forward_mistakes(
        Mistake, TILE, keep=(lambda p, x: _keep(p)) if causal else None) + [_key_from_g_mistake(causal, block_rows)]
    if bf16:  # the mistakes see the inputs' values, not their bits
        mistakes = [Mistake(m.name, m.explain, lambda p, x, w=m.wrong: w(p, _values(x))) for m in mistakes]
    row = dict(
        id=ex_id,
        hidden_sizes={"N": 64},
        module=MODULE,
        kernel=kernel,
        signature=f"{kernel}(const elem* Q, const elem* K, const elem* V, elem* O, float* L, int N, float scale)",
        launch_shape=f"compiled with -DHEAD_DIM={d} {' '.join(extra)} (elem = {elem}; BLOCK_ROWS={block_rows}, "
        f"STAGES={stages}); grid = (ceil_div(N, BLOCK_ROWS), H, B), block = 2 * BLOCK_ROWS"
        f"{' + 32' if spec.get('producer') else ''} threads (warp w owns "
        f"query rows 16w..16w+15 of the block's tile); dynamic shared memory = (BLOCK_ROWS + 2 * STAGES * {TILE}) * "
        f"(HEAD_DIM{' + 8' if spec['pad'] else ''}) * 2 bytes: {spec['what']}"
        f"{'; query row i sees keys 0..i, warps skip key tiles past their last row' if causal else ''}; "
        "Q, K, V, O [B, H, N, d], L [B, H, N] float (natural-log logsumexp)",
        make_inputs=_inputs_bf16 if bf16 else _inputs,
        outputs=dict(O=lambda p: ((p.B, p.H, p.N, p.d), BF16 if bf16 else F16), L=lambda p: ((p.B, p.H, p.N), F32)),
        reference=_reference,
        magnitude=_magnitude,
        args=_args,
        grid=lambda p: (ceil_div(p.N, block_rows), p.H, p.B),
        block=lambda p: block_threads(kernel, block_rows),
        shared_mem=lambda p: shared_bytes(p.d, block_rows, stages, spec["pad"]),
        options=(f"-DHEAD_DIM={d}", *extra),
        cases=_rows(dict(d=d, causal=causal)),
        race_check=True,
        race_case="five_tiles",
        mistakes=mistakes,
        profile_check=spec["profile"],
        profile_case="tile_plus_one" if spec["profile"] else None,
        io_check=tile_skipping_io(block_rows, TILE, 2) if causal else None,
        io_case="five_tiles",
    )
    ex = exercise(**row) if register else Exercise(**row)
    bench = benchspec.forward_spec(ex_id, d=d, causal=causal)
    if register:
        benchspec.SPECS[ex_id] = bench
        register_space(Space(
            exercise=ex_id,
            params={"BLOCK_ROWS": (64, 128), "STAGES": (2, 3, 4)},
            grid=lambda p, cfg: (ceil_div(p.N, cfg["BLOCK_ROWS"]), p.H, p.B),
            block=lambda p, cfg: block_threads(kernel, cfg["BLOCK_ROWS"]),
            shared_mem=lambda p, cfg: shared_bytes(p.d, cfg["BLOCK_ROWS"], cfg["STAGES"], spec["pad"]),
            row_fields=(lambda cfg: {"io_check": tile_skipping_io(cfg["BLOCK_ROWS"], TILE, 2)}) if causal else None,
        ))
    return ex, bench


# The graded builds of each kernel (the benchmarks build the others with register=False).
for _kernel, _builds in {
    "tc_flash_fwd_pipe": [(64, False, STAGES), (128, False, STAGES), (64, True, STAGES), (64, False, 3)],
    "tc_flash_fwd_swizzle": [(64, False, STAGES), (128, False, STAGES), (64, True, STAGES), (64, False, 3)],
    "tc_flash_fwd_ws": [(64, False, STAGES), (128, False, STAGES), (64, True, STAGES), (64, False, 3)],
}.items():
    for _d, _causal, _stages in _builds:
        variant(_kernel, _d, "fp16", _causal, _stages)

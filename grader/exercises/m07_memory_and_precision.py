"""07_memory_and_precision: 16-byte accesses, conflict-free shared memory, half-precision I/O."""
import numpy as np

from .. import reference as ref
from ..arrays import bf16_bits
from ..exercise_rows import Mistake, case, exercise, hidden
from ..launch import ceil_div
from .m04_flash_forward import CASES as FA2_CASES, FA2_BC, FA2_BR, RACE_CASE
from .shared import OUTPUTS, forward_magnitude, forward_mistakes, forward_ref, qkv, scale_of

MODULE = "07_memory_and_precision"
F16 = np.float16
# A conversion has one right answer (round to nearest, ties to even): this (rtol, atol) admits nothing
# else, being far below any spacing of fp16 values or of bf16 bit patterns, yet keeps error ratios finite.
EXACT = (2.0 ** -24, 1e-30)

# --------------------------------------------------------------------------- 1. conversion

CONVERT_BLOCK = 256
CONVERT_PER_THREAD = 4  # one float4 in, four halves (8 bytes) out per output


def _convert_inputs(p, rng):
    """Normal values at a scale of ``spread``; ``specials`` adds the values where fp16 and bf16
    part ways (past fp16's range, below its normal range, halfway cases, inf, NaN)."""
    x = rng.standard_normal(p.n) * getattr(p, "spread", 1.0)
    if getattr(p, "specials", False):
        special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 65504.0, 65519.0, 65520.0, 1e5, -3e38,
                            6e-8, 1e-8, 3e-5, 1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11, 1.0 + 2.0 ** -8,
                            1.0 + 3 * 2.0 ** -8, 3.4028235e38, 1e-40], np.float64)
        x[: special.size] = special[: p.n]
    return dict(x=x.astype(np.float32))


def _convert_ref(p, x):
    with np.errstate(over="ignore"):  # past 65504 fp16 is inf: expected
        return dict(h=x["x"].astype(F16).astype(np.float64), b_bits=bf16_bits(x["x"]).astype(np.float64))


def _tail_missing(p, x):
    tail = p.n % CONVERT_PER_THREAD
    if tail == 0:
        return None
    want = _convert_ref(p, x)
    h, b = want["h"].copy(), want["b_bits"].copy()
    h[-tail:], b[-tail:] = np.nan, 0xFFFF  # still poisoned (uint16 outputs are poisoned with all bits set)
    return dict(h=h, b_bits=b)


def _bf16_truncated(p, x):
    return dict(b_bits=(x["x"].view(np.uint32) >> 16).astype(np.float64))


def _fp16_toward_zero(p, x):
    f = x["x"].astype(np.float64)
    h = _convert_ref(p, x)["h"]
    down = (np.abs(h) > np.abs(f)) & np.isfinite(f)  # rounded away from zero: step back one fp16 value
    stepped = np.nextafter(h.astype(F16), F16(0)).astype(np.float64)
    return dict(h=np.where(down, stepped, h))


CONVERT_MISTAKES = [
    Mistake("vector tail missing",
            f"the last n % {CONVERT_PER_THREAD} elements were never converted: the thread whose group of "
            f"{CONVERT_PER_THREAD} runs past n must convert the elements it does have one at a time (a float4 "
            "there would read past the array).", _tail_missing),
    Mistake("bf16 rounded by truncation",
            "keeping the top 16 bits of the float (bits >> 16) rounds toward zero; CUDA's __float2bfloat16_rn "
            "(and __floats2bfloat162_rn) round to nearest, ties to even, which is what the reference does.",
            _bf16_truncated),
    Mistake("fp16 rounded toward zero",
            "__float2half_rz rounds toward zero; use __float2half_rn or __floats2half2_rn (nearest, ties to even).",
            _fp16_toward_zero),
]


def _vector_share(profile, op, min_bytes):
    """(share of the bytes moved by global ``op``s at least ``min_bytes`` wide, the row that moved the most
    bytes in narrower accesses)."""
    rows = [r for r in profile.rows if r.space == "global" and r.op == op]
    total = sum(r.lane_accesses * r.bytes for r in rows)
    narrow = [r for r in rows if r.bytes < min_bytes]
    wide = total - sum(r.lane_accesses * r.bytes for r in narrow)
    worst = max(narrow, key=lambda r: r.lane_accesses * r.bytes, default=None)
    return (wide / total if total else 1.0), worst


def _convert_profile(profile, p):
    """Nearly every byte must move in the wide accesses: 16-byte loads of x, 8-byte stores of 4 halves."""
    for op, width, what in (("load", 16, "load 4 floats at once as a float4"),
                            ("store", 8, "store 4 halves at once (8 bytes: two __half2, or a uint2)")):
        share, worst = _vector_share(profile, op, width)
        if share < 0.9:
            where = f"line {worst.line}: " if worst is not None and worst.line else ""
            return (f"{where}{worst.bytes}-byte global {op}s ({worst.requests} warp requests) move "
                    f"{1 - share:.0%} of the bytes; {what}, and leave scalar accesses to the tail only.")
    return None


exercise(
    id="convert_f32_half",
    hidden_sizes={"n": 4},
    module=MODULE,
    nan_causes="",
    kernel="convert_f32_half",
    signature="convert_f32_half(const float* x, __half* h, __nv_bfloat16* b, int n)",
    launch_shape=f"grid = ceil_div(n, {CONVERT_PER_THREAD * CONVERT_BLOCK}), block = {CONVERT_BLOCK}: thread i "
    f"converts x[{CONVERT_PER_THREAD}i .. {CONVERT_PER_THREAD}i+3] with one 16-byte load and one 8-byte store into "
    "each of h (fp16) and b (bf16); the thread whose group runs past n converts what is left one element at a time. "
    "b is a bfloat16 array, compared as its 16-bit patterns (b_bits); both outputs must be exact",
    make_inputs=_convert_inputs,
    outputs=dict(h=lambda p: ((p.n,), F16), b_bits=lambda p: ((p.n,), np.uint16)),
    reference=_convert_ref,
    args=lambda p, a: (a.x, a.h, a.b_bits, np.int32(p.n)),
    grid=lambda p: ceil_div(p.n, CONVERT_PER_THREAD * CONVERT_BLOCK),
    block=lambda p: CONVERT_BLOCK,
    cases=[
        case("one_element", n=1, seed=1),
        case("one_group_less_one", n=3, seed=2),
        case("one_group", n=4, seed=3),
        case("special_values", n=64, specials=True, seed=4),
        case("tail_of_3", n=1027, spread=100.0, seed=5),
        case("many_blocks", n=5000, spread=1e4, seed=6),
        hidden("tail_of_1", n=4097, spread=3.0),
        hidden("tail_of_2", n=2050, spread=1e5, specials=True),
        hidden("large_exact", n=8192, spread=0.01),
        hidden("past_2_24", n=2**24 + 5, spread=3.0),  # an index held in a float skips elements from 2^24 on
    ],
    mistakes=CONVERT_MISTAKES,
    tolerance=dict(h=EXACT, b_bits=EXACT),
    profile_check=_convert_profile,
    profile_case="many_blocks",
)

# --------------------------------------------------------------------------- 2. conflict-free fa2

PAD = 1  # the launch's shared memory leaves one spare float per row of Q, O, K and V


def bank_conflict_check(advice):
    """A ``profile_check``: shared loads must take close to the fewest wavefronts their bytes need;
    a failure names the worst line, then ``advice(p)`` (what causes the conflicts and the fix)."""

    def check(profile, p):
        loads = [r for r in profile.rows if r.space == "shared" and r.op == "load"]
        units, ideal = sum(r.units for r in loads), sum(r.ideal for r in loads)
        if not ideal or units <= 1.2 * ideal:
            return None
        worst = max(loads, key=lambda r: r.units - r.ideal)
        return (f"line {worst.line}: {worst.per_request:.1f} wavefronts per shared load request, ideal "
                f"{worst.ideal_per_request:.1f} (all shared loads: {units / ideal:.1f}x the ideal). {advice(p)}")

    return check


_banks_profile = bank_conflict_check(
    lambda p: f"The 16 lanes of a score row read K rows {p.d} floats apart: when the row stride is a multiple of 32 "
    "floats, every lane lands in the same bank and the reads are served one after another. Pad each row to d + 1 "
    "floats (an odd stride spreads them over 16 banks), or swizzle: store column c of row r at c ^ r.")


def _magnitude(p, x):
    return forward_magnitude(x, float(scale_of(p)))


exercise(
    id="flash_fwd_fa2_padded",
    hidden_sizes={"N": 16, "d": 8},
    module=MODULE,
    kernel="flash_fwd_fa2_padded",
    signature="flash_fwd_fa2_padded(const float* Q, const float* K, const float* V, float* O, float* L, int N, int d, "
    "float scale)",
    launch_shape=f"as module 04's flash_fwd_fa2: grid = (ceil_div(N, {FA2_BR}), H, B), block = ({FA2_BC}, {FA2_BR}); "
    f"dynamic shared memory = (2*{FA2_BR}*(d+{PAD}) + 2*{FA2_BC}*(d+{PAD}) + {FA2_BR}*{FA2_BC} + 2*{FA2_BR}) floats, "
    "room for rows of Q, O, K and V padded by one float; the check also profiles the shared loads on the emulator",
    make_inputs=qkv,
    outputs=OUTPUTS,
    reference=forward_ref,
    args=lambda p, a: (a.Q, a.K, a.V, a.O, a.L, np.int32(p.N), np.int32(p.d), scale_of(p)),
    grid=lambda p: (ceil_div(p.N, FA2_BR), p.H, p.B),
    block=lambda p: (FA2_BC, FA2_BR),
    shared_mem=lambda p: 4 * (2 * FA2_BR * (p.d + PAD) + 2 * FA2_BC * (p.d + PAD) + FA2_BR * FA2_BC + 2 * FA2_BR),
    cases=FA2_CASES,
    race_check=True,
    race_case=RACE_CASE,
    magnitude=_magnitude,
    mistakes=forward_mistakes(Mistake, FA2_BC),
    profile_check=_banks_profile,
    profile_case="tile_plus_one",
)

# --------------------------------------------------------------------------- 3. fp16 flash forward

HALF_ROWS = 64  # query rows per block
HALF_TPR = 4  # threads per query row
HALF_BC = 32  # keys per tile
FP16_MAX = 65504.0


def _half_inputs(p, rng):
    """qkv in fp16. ``faint``: key 0 scores 0 and every other key -8.5 (each gets e^-8.5 ~ 2e-4 of key 0's
    weight, together several percent); ``v_offset`` (qkv) shifts V."""
    x = qkv(p, rng)
    if getattr(p, "faint", False):
        x["Q"][:] = 0.0
        x["Q"][..., 0] = 1.0
        x["K"][..., 0] = -8.5 / float(scale_of(p))
        x["K"][..., 0, 0] = 0.0
    return {k: v.astype(F16) for k, v in x.items()}


def _half_ref(p, x):
    o, lse = ref.attention_forward(*(x[n].astype(np.float64) for n in ("Q", "K", "V")), scale=float(scale_of(p)))
    return dict(O=o, L=lse)


def _half_magnitude(p, x):
    """L (float32) is judged like the fp32 kernels' L; O only against its own size, the fp16 rounding of the output."""
    wide = {n: x[n].astype(np.float64) for n in ("Q", "K", "V")}
    return dict(L=forward_magnitude(wide, float(scale_of(p)))["L"])


def _f16(a):
    return np.asarray(a, np.float64).astype(F16).astype(np.float64)


def _tile_states(p, x):
    """Per key tile, in the kernel's order: (m_old, m_new, p) with p = exp(s - m_new) [..., N_q, tile keys]."""
    q, k = (x[n].astype(np.float64) for n in ("Q", "K"))
    s = float(scale_of(p)) * q @ np.swapaxes(k, -1, -2)
    m = np.full(s.shape[:-1], -np.inf)
    for start in range(0, p.N, HALF_BC):
        tile = s[..., start:start + HALF_BC]
        m_new = np.maximum(m, tile.max(axis=-1))
        yield start, m, m_new, np.exp(tile - m_new[..., None])
        m = m_new


def _fp16_running_sum(p, x):
    """l kept in fp16: each key's p is added with one fp16 rounding, and the sum stops growing once p is
    below half of l's spacing."""
    v = x["V"].astype(np.float64)
    acc = np.zeros(v.shape[:-2] + (p.N, p.d))
    ell = np.zeros(acc.shape[:-1])
    for start, m_old, m_new, pt in _tile_states(p, x):
        alpha = np.exp(m_old - m_new)
        ell = _f16(ell * alpha)
        for j in range(pt.shape[-1]):
            ell = _f16(ell + pt[..., j])
        acc = alpha[..., None] * acc + pt @ v[..., start:start + HALF_BC, :]
    m = ref.partial_state(*(x[n].astype(np.float64) for n in ("Q", "K", "V")), scale=float(scale_of(p)))[0]
    return dict(O=acc / ell[..., None], L=m + np.log(ell))


def _fp16_accumulator(p, x):
    """acc kept in fp16: the unnormalised sum of p * v passes 65504 and becomes inf (where it does)."""
    v = x["V"].astype(np.float64)
    acc = np.zeros(v.shape[:-2] + (p.N, p.d))
    peak = np.zeros_like(acc)
    for start, m_old, m_new, pt in _tile_states(p, x):
        acc = np.exp(m_old - m_new)[..., None] * acc + pt @ v[..., start:start + HALF_BC, :]
        peak = np.maximum(peak, np.abs(acc))
    if not (peak > FP16_MAX).any():
        return None
    o = _half_ref(p, x)["O"]
    return dict(O=np.where(peak > FP16_MAX, np.copysign(np.inf, acc), o))


HALF_MISTAKES = [
    Mistake("output accumulator kept in fp16",
            "acc is the unnormalised sum of p * v: it grows to about l * |v| (here past 65504, the largest fp16) and "
            "overflows to inf. Keep acc in float registers and convert to __half once, when O is written.",
            _fp16_accumulator),
    Mistake("running sum l kept in fp16",
            "fp16 carries 11 significant bits: once l is near 1, adding a key's weight below 2^-12 changes nothing, "
            "so many faint keys vanish from the sum. Keep m and l in float; only the tensors in memory are fp16.",
            _fp16_running_sum),
] + forward_mistakes(Mistake, HALF_BC)


def _half_cases(d):
    return [
        case("single_query", B=1, H=1, N=1, d=d, seed=1),
        case("one_tile", B=1, H=1, N=32, d=d, seed=2),
        case("tile_plus_one", B=1, H=2, N=33, d=d, seed=3),
        case("rising_max", B=1, H=1, N=100, d=d, rising=True, seed=4),
        case("large_logits", B=1, H=1, N=70, d=d, spread=30.0, seed=5),
        case("faint_keys", B=1, H=1, N=256, d=d, faint=True, seed=6),
        case("uniform_large_values", B=1, H=1, N=256, d=d, spread=0.0, v_offset=300.0, seed=7),
        case("batches_and_heads", B=2, H=3, N=40, d=d, seed=8),
        case("scores_below_minus_87", B=1, H=1, N=80, d=d, negative=150.0, seed=9),
        case("falling_max", B=1, H=1, N=100, d=d, falling=100.0, seed=10),
        case("other_scale", B=1, H=1, N=64, d=d, scale=0.3, seed=11),
        hidden("sizes_127", B=1, H=2, N=127, d=d),
        hidden("sizes_129_rising", B=2, H=1, N=129, d=d, rising=True),
        hidden("custom_scale_ragged", B=1, H=1, N=127, d=d, scale=0.2),
    ]


for _d in (64, 128):
    exercise(
        id=f"flash_fwd_half_d{_d}",
        hidden_sizes={"N": 64},
        module=MODULE,
        kernel="flash_fwd_half",
        signature="flash_fwd_half(const __half* Q, const __half* K, const __half* V, __half* O, float* L, int N, "
        "float scale)",
        launch_shape=f"compiled with -DHEAD_DIM={_d}; grid = (ceil_div(N, {HALF_ROWS}), H, B), block = "
        f"{HALF_ROWS * HALF_TPR}: threads 4r .. 4r+3 share query row blockIdx.x*{HALF_ROWS} + r, each holding a "
        f"quarter of q and of the accumulator in registers; K/V tiles of {HALF_BC} keys staged in shared memory "
        "(as float); Q, K, V, O fp16 [B, H, N, d], L float [B, H, N]",
        make_inputs=_half_inputs,
        outputs=dict(O=lambda p: ((p.B, p.H, p.N, p.d), F16), L=lambda p: ((p.B, p.H, p.N), np.float32)),
        reference=_half_ref,
        args=lambda p, a: (a.Q, a.K, a.V, a.O, a.L, np.int32(p.N), scale_of(p)),
        grid=lambda p: (ceil_div(p.N, HALF_ROWS), p.H, p.B),
        block=lambda p: HALF_ROWS * HALF_TPR,
        cases=_half_cases(_d),
        race_check=True,
        race_case="tile_plus_one",
        magnitude=_half_magnitude,
        mistakes=HALF_MISTAKES,
        options=(f"-DHEAD_DIM={_d}",),
    )

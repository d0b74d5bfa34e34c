"""Numerics of the emulator's math headers (emu_math.hpp, cuda_fp16.h, cuda_bf16.h), checked
against NumPy and exact (Fraction) references.

probe.cpp runs each batch of inputs through the headers in one process; the references here
are independent of the C++: 16-bit rounding picks between the neighbours of the exact value in
a table of every representable value, directed float rounding brackets the exact value with
Fractions, integer intrinsics use Python integers.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

RNG = np.random.default_rng(20240607)
MODES = ("rn", "rz", "ru", "rd")


# ------------------------------------------------------------------------------------------------
# 16-bit formats: a table of all non-negative finite values, indexed by bit pattern
# ------------------------------------------------------------------------------------------------
class Fmt16:
    def __init__(self, inf_bits: int, decode, top: float):
        self.inf = inf_bits
        # values[i] is the value of bit pattern i for i < inf; values[inf] = 2^(emax+1), the first
        # value past the largest finite one (an upper neighbour for rounding, standing for inf).
        self.values = np.append(decode(np.arange(inf_bits, dtype=np.uint16)), top)

    def decode(self, bits) -> np.ndarray:
        """Values of bit patterns as float64 (NaN for NaNs)."""
        bits = np.asarray(bits, np.uint16)
        mag = bits & 0x7FFF
        out = np.where(mag < self.inf, self.values[np.minimum(mag, self.inf)], np.inf)
        out = np.where(mag > self.inf, np.nan, out)
        return np.where(bits & 0x8000, -out, out)


HALF = Fmt16(0x7C00, lambda b: b.view(np.float16).astype(np.float64), 2.0**16)
BF16 = Fmt16(0x7F80, lambda b: (b.astype(np.uint32) << 16).view(np.float32).astype(np.float64), 2.0**128)


def _select(fmt: Fmt16, neg, lo, exact, above_mid, at_mid, beyond, mode):
    """Pick the bit pattern (magnitude index lo or lo + 1) for rounding mode `mode`."""
    hi = lo + 1
    rn = np.where(exact, lo, np.where(above_mid, hi, np.where(at_mid & (lo % 2 == 1), hi, lo)))
    away = np.where(exact, lo, hi)  # larger magnitude
    n = fmt.inf
    if mode == "rn":
        r, r_beyond = rn, n
    elif mode == "rz":
        r, r_beyond = lo, n - 1
    elif mode == "ru":
        r, r_beyond = np.where(neg, lo, away), np.where(neg, n - 1, n)
    else:
        r, r_beyond = np.where(neg, away, lo), np.where(neg, n, n - 1)
    return np.where(beyond, r_beyond, r)


def round16(fmt: Fmt16, x, mode: str = "rn") -> np.ndarray:
    """Round float64 values to the 16-bit format, exactly (one rounding from the float64 value).
    NaN gives the canonical 0x7FFF, like the GPU."""
    with np.errstate(invalid="ignore"):  # float32 signalling NaNs
        x = np.asarray(x, np.float64)
    neg = np.signbit(x)
    a = np.abs(x)
    with np.errstate(invalid="ignore"):
        lo = np.clip(np.searchsorted(fmt.values, a, side="right") - 1, 0, fmt.inf - 1)
        beyond = ~(a < fmt.values[-1])  # |x| >= 2^(emax+1), inf, nan (nan fixed below)
        mid = (fmt.values[lo] + fmt.values[lo + 1]) / 2  # exact: neighbours differ in one bit
        r = _select(fmt, neg, lo, fmt.values[lo] == a, a > mid, a == mid, beyond, mode)
    r = np.where(np.isinf(x), fmt.inf, r)
    bits = (r | (neg.astype(np.int64) << 15)).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FFF), bits)


def round16_exact(fmt: Fmt16, v: Fraction, mode: str = "rn", neg_zero: bool = False) -> int:
    """round16 of an exact rational (neg_zero: the sign when v is exactly 0)."""
    neg = v < 0 or (v == 0 and neg_zero)
    a = abs(v)
    vals = fmt.values
    beyond = a >= Fraction(vals[-1])
    lo = min(max(int(np.searchsorted(vals, float(a), side="right")) - 1, 0), fmt.inf - 1)
    while lo > 0 and Fraction(vals[lo]) > a:
        lo -= 1
    while lo < fmt.inf - 1 and Fraction(vals[lo + 1]) <= a:
        lo += 1
    mid = (Fraction(vals[lo]) + Fraction(vals[lo + 1])) / 2
    r = _select(fmt, np.bool_(neg), np.int64(lo), Fraction(vals[lo]) == a, a > mid, a == mid, beyond, mode)
    return int(r) | (0x8000 if neg else 0)


def assert_bits(got, want, what: str, inputs=None) -> None:
    got, want = np.asarray(got), np.asarray(want)
    bad = np.flatnonzero(got != want)
    if bad.size:
        i = bad[0]
        ctx = f" for input {inputs[i]!r}" if inputs is not None else ""
        raise AssertionError(f"{what}: {bad.size} mismatches, first at #{i}{ctx}: got {got[i]!r}, want {want[i]!r}")


def assert_bits16(fmt: Fmt16, got, want, what: str, inputs=None) -> None:
    """Bit-exact, except that any NaN matches any NaN."""
    got, want = np.asarray(got, np.uint16), np.asarray(want, np.uint16)
    both_nan = ((got & 0x7FFF) > fmt.inf) & ((want & 0x7FFF) > fmt.inf)
    assert_bits(np.where(both_nan, 0, got), np.where(both_nan, 0, want), what, inputs)


def random_bits16(n: int) -> np.ndarray:
    return RNG.integers(0, 1 << 16, n, dtype=np.uint64).astype(np.uint16)


def special16(fmt: Fmt16) -> np.ndarray:
    inf = fmt.inf
    mags = [0, 1, 2, 0x3FF, inf >> 1, inf - 1, inf - 2, inf, inf + 1, 0x7FFF]
    mags += [int(b) for b in round16(fmt, [0.5, 1.0, 1.5, 2.0, 3.0, 1 / 3, 1e-3, 1e3])]
    return np.array(mags + [m | 0x8000 for m in mags], np.uint16)


# ------------------------------------------------------------------------------------------------
# Exact rounding of a real number (given by a comparator) to float32 / float64
# ------------------------------------------------------------------------------------------------
def round_float(dtype, cmp, guess: float, mode: str, neg_zero: bool = False):
    """Round the real v to dtype in mode; cmp(q) = sign(q - v) for a Fraction q. guess ~ v."""
    big = dtype(np.finfo(dtype).max)
    inf = dtype(np.inf)
    fr = lambda x: Fraction(float(x))  # noqa: E731
    if cmp(Fraction(0)) == 0:
        return dtype(-0.0 if neg_zero else 0.0)
    positive = cmp(Fraction(0)) < 0
    if cmp(fr(big)) < 0:
        lo, hi = big, inf
    elif cmp(-fr(big)) > 0:
        lo, hi = -inf, -big
    else:
        with np.errstate(over="ignore"):
            g = dtype(np.clip(guess, -float(big), float(big)))
        while cmp(fr(g)) > 0:
            g = np.nextafter(g, -inf)
        while cmp(fr(np.nextafter(g, inf))) <= 0:
            g = np.nextafter(g, inf)
        lo, hi = g, (g if cmp(fr(g)) == 0 else np.nextafter(g, inf))
    if lo == hi:
        r = lo
    elif mode == "rd":
        r = lo
    elif mode == "ru":
        r = hi
    elif mode == "rz":
        r = lo if positive else hi
    else:
        half_ulp = (fr(big) - fr(np.nextafter(big, dtype(0)))) / 2
        mid = (fr(big) + half_ulp) if np.isinf(hi) else (-fr(big) - half_ulp) if np.isinf(lo) else (fr(lo) + fr(hi)) / 2
        c = cmp(mid)
        if c < 0:
            r = hi
        elif c > 0:
            r = lo
        else:  # tie: even significand (an infinite neighbour wins, as IEEE overflow does)
            r = hi if np.isinf(hi) else lo if np.isinf(lo) else lo if int(np.array(lo).view(f"u{lo.itemsize}")) % 2 == 0 else hi
    if r == 0:
        r = dtype(0.0) if positive else dtype(-0.0)
    return dtype(r)


def round_fraction(dtype, v: Fraction, mode: str, neg_zero: bool = False):
    try:
        guess = float(v)
    except OverflowError:
        guess = math.inf if v > 0 else -math.inf
    return round_float(dtype, lambda q: (q > v) - (q < v), guess, mode, neg_zero)


def round_sqrt(dtype, a: Fraction, mode: str):
    if a == 0:
        return None  # sqrt(+-0) = +-0: left to the caller
    return round_float(dtype, lambda q: (q > 0 and q * q > a) - (q < 0 or q * q < a), math.sqrt(a), mode)


def zero_sum_neg(x_neg: bool, y_neg: bool, x_zero: bool, y_zero: bool, mode: str) -> bool:
    """IEEE sign of an exact zero sum x + y."""
    if x_zero and y_zero and x_neg == y_neg:
        return x_neg
    return mode == "rd"


def same_float(got, want) -> bool:
    got, want = np.asarray(got), np.asarray(want)
    if np.isnan(want):
        return bool(np.isnan(got))
    return got.tobytes() == want.astype(got.dtype).tobytes()


# ================================================================================================
# float <-> half / bfloat16 conversions
# ================================================================================================
def float_inputs_near(fmt: Fmt16, random_n: int = 100_000) -> np.ndarray:
    """float32 values at, next to and between the 16-bit values, random ones and specials."""
    v = fmt.values[:-1]
    mids = (v[:-1] + v[1:]) / 2  # exact in float32 for both formats
    base = np.concatenate([v, mids, -v, -mids]).astype(np.float32)
    near = np.concatenate([np.nextafter(base, np.float32(np.inf)), np.nextafter(base, np.float32(-np.inf))])
    rand = RNG.integers(0, 1 << 32, random_n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 65504, 65519.99, 65520, 65536, 1e-8,
                        3.4028235e38, -3.4028235e38, 1e-45, 5.96e-8, 2.98e-8, 2.9802322e-8], np.float32)
    return np.concatenate([base, near, rand, special])


def test_float_to_half_all_modes(probe):
    x = float_inputs_near(HALF)
    out = probe("f2h", x, np.uint16, 8)
    with np.errstate(over="ignore", invalid="ignore"):
        numpy_rn = x.astype(np.float16).view(np.uint16)
    assert_bits16(HALF, out[:, 0], numpy_rn, "__float2half_rn vs np.float16", x)
    for col, mode in enumerate(MODES):
        assert_bits(out[:, col], round16(HALF, x, mode), f"__float2half_{mode}", x)
    for col, name in [(4, "__float2half"), (5, "__half(float)"), (6, "__float2half2_rn"), (7, "__floats2half2_rn")]:
        assert_bits(out[:, col], out[:, 0], name, x)
    assert np.all(out[np.isnan(x), 0] == 0x7FFF), "NaN must become the canonical 0x7FFF"


def test_double_to_half_rounds_once(probe):
    v = HALF.values[:-1]
    mids = (v[:-1] + v[1:]) / 2
    # Just above/below a midpoint by far less than a float ulp: rounding via float would tie.
    x = np.concatenate([mids, np.nextafter(mids, np.inf), np.nextafter(mids, -np.inf), -mids * (1 + 2**-40),
                        RNG.normal(0, 1000, 20_000), [np.inf, -np.inf, np.nan, 1e300, -1e-300, 65519.999999]])
    out = probe("d2h", x, np.uint16, 2)
    assert_bits(out[:, 0], round16(HALF, x), "__double2half", x)
    assert_bits(out[:, 1], out[:, 0], "__half(double)", x)
    with np.errstate(over="ignore", invalid="ignore"):
        assert_bits16(HALF, out[:, 0], x.astype(np.float16).view(np.uint16), "__double2half vs np.float16", x)


def test_half_to_float_exhaustive(probe):
    bits = np.arange(1 << 16, dtype=np.uint16)
    out = probe("h2f", bits, np.float32, 4)
    want = bits.view(np.float16).astype(np.float32)
    nan = np.isnan(want)
    assert_bits(out[~nan, 0].view(np.uint32), want[~nan].view(np.uint32), "__half2float", bits[~nan])
    assert np.all(out[nan, 0].view(np.uint32) == 0x7FFFFFFF), "NaN -> canonical float NaN, like CUDA"
    assert_bits(out[:, 1].view(np.uint32), out[:, 0].view(np.uint32), "float(__half)")
    assert_bits(out[:, 2].view(np.uint32), out[:, 0].view(np.uint32), "__low2float(__half2half2)")
    assert_bits(out[~nan, 3], -out[~nan, 0], "__half22float2 of -h")


def bf16_rne_bits(x: np.ndarray) -> np.ndarray:
    """The classic bit-level float32 -> bfloat16: add 0x7FFF + lsb, keep the top 16 bits; NaN -> 0x7FFF."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FFF), r)


def test_float_to_bfloat16_all_modes(probe):
    x = float_inputs_near(BF16)
    out = probe("f2b", x, np.uint16, 8)
    assert_bits(out[:, 0], bf16_rne_bits(x), "__float2bfloat16_rn vs bit-level reference", x)
    for col, mode in enumerate(MODES):
        assert_bits(out[:, col], round16(BF16, x, mode), f"__float2bfloat16_{mode}", x)
    for col, name in [(4, "__float2bfloat16"), (5, "__nv_bfloat16(float)"), (6, "__float2bfloat162_rn"),
                      (7, "__float22bfloat162_rn")]:
        assert_bits(out[:, col], out[:, 0], name, x)
    # NaN stays NaN: never an inf through the rounding carry (0x7FFFFFFF + 0x7FFF would overflow).
    assert np.all(out[np.isnan(x), :4] == 0x7FFF)


def test_double_to_bfloat16_rounds_once(probe):
    v = BF16.values[:-1]
    mids = (v[:-1] + v[1:]) / 2
    pick = RNG.choice(mids.size, 20_000, replace=False)
    x = np.concatenate([mids[pick], np.nextafter(mids[pick], np.inf), np.nextafter(mids[pick], -np.inf),
                        RNG.normal(0, 1e10, 10_000), [np.inf, -np.inf, np.nan, 1e300, -1e-300, 3.3961775e38]])
    out = probe("d2b", x, np.uint16, 2)
    assert_bits(out[:, 0], round16(BF16, x), "__double2bfloat16", x)
    assert_bits(out[:, 1], out[:, 0], "__nv_bfloat16(double)", x)


def test_bfloat16_to_float_exhaustive(probe):
    bits = np.arange(1 << 16, dtype=np.uint16)
    out = probe("b2f", bits, np.float32, 3)
    want = (bits.astype(np.uint32) << 16)
    for col, name in enumerate(["__bfloat162float", "float(__nv_bfloat16)", "__bfloat1622float2"]):
        assert_bits(out[:, col].view(np.uint32), want, name, bits)


def test_half_bfloat16_cross_conversions(probe):
    bits = np.arange(1 << 16, dtype=np.uint16)
    out = probe("h2b", bits, np.uint16, 2)
    assert_bits(out[:, 0], round16(BF16, HALF.decode(bits)), "__nv_bfloat16(__half)", bits)
    assert_bits(out[:, 1], round16(HALF, BF16.decode(bits)), "__half(__nv_bfloat16)", bits)


# ================================================================================================
# half / bfloat16 arithmetic
# ================================================================================================
def arith_reference(fmt: Fmt16, a, b, c) -> dict[int, np.ndarray]:
    """Expected columns of probe's arith() for float64-exact operands (see the callers)."""
    fa, fb, fc = fmt.decode(a), fmt.decode(b), fmt.decode(c)
    r = lambda x: round16(fmt, x)  # noqa: E731
    with np.errstate(all="ignore"):
        add, sub, mul, div = r(fa + fb), r(fa - fb), r(fa * fb), r(fa / fb)
        fma = lambda x, y, z: r(x * y + z)  # noqa: E731  (x*y is exact in float64)
        sat = lambda x: np.where(x >= 1, 1.0, np.where(x > 0, x, 0.0))  # noqa: E731
        relu = lambda x: np.where(np.isnan(x), x, np.where(x > 0, x, 0.0))  # noqa: E731
        nan_a, nan_b = np.isnan(fa), np.isnan(fb)

        def hmax(x, y, fx, fy, bigger):
            pick = np.where(bigger(fx, fy), x, y)
            pick = np.where(fx == fy, np.where(x & 0x8000, y, x) if bigger is np.greater else np.where(x & 0x8000, x, y), pick)
            pick = np.where(np.isnan(fx), y, np.where(np.isnan(fy), x, pick))
            return np.where(np.isnan(fx) & np.isnan(fy), 0x7FFF, pick).astype(np.uint16)

        mx, mn = hmax(a, b, fa, fb, np.greater), hmax(a, b, fa, fb, np.less)
        cmp = [fa == fb, (fa < fb) | (fa > fb), fa < fb, fa <= fb, fa > fb, fa >= fb, ~((fa < fb) | (fa > fb)),
               ~(fa == fb), ~(fa >= fb), ~(fa > fb), ~(fa <= fb), ~(fa < fb), fa == fb, ~(fa == fb), fa < fb, fa >= fb]
        one = fmt.decode(round16(fmt, 1.0))
        return {
            0: add, 1: sub, 2: mul, 3: div, 4: fma(fa, fb, fc), 5: mx, 6: mn,
            7: np.where(nan_a | nan_b, 0x7FFF, mx), 8: np.where(nan_a | nan_b, 0x7FFF, mn),
            9: np.where(nan_a, 0x7FFF, a ^ 0x8000), 10: np.where(nan_a, 0x7FFF, a & 0x7FFF), 11: r(sat(fa + fb)), 12: r(relu(fa * fb + fc)), 13: r(sat(fa * fb + fc)),
            14: r(sat(fa * fb)), 15: add, 16: sub, 17: mul, 18: div, 19: np.where(nan_a, 0x7FFF, a ^ 0x8000), 20: add, 21: r(fa + one),
            22: add, 23: r(fb + fc), 24: r(fb * fc), 25: fma(fb, fc, fa), 26: r(fb / fc),
            27: hmax(b, c, fb, fc, np.greater), 28: r(fmt.decode(r(fb * fc)) + fa),
            29: fma(-fb, fc, fmt.decode(fma(fa, fb, fc))), 30: fma(fb, fb, fmt.decode(fma(fa, fc, fa))),
            31: sum(x.astype(np.uint16) << i for i, x in enumerate(cmp)), 32: np.ones_like(a),
        }


def check_arith(probe, op: str, fmt: Fmt16, a, b, c, columns=None) -> None:
    out = probe(op, np.stack([a, b, c], axis=1).astype(np.uint16), np.uint16, 34)
    names = ["add", "sub", "mul", "div", "fma", "max", "min", "max_nan", "min_nan", "neg", "abs", "add_sat",
             "fma_relu", "fma_sat", "mul_sat", "op+", "op-", "op*", "op/", "unary-", "op+=", "op++", "hadd2.x",
             "hadd2.y", "hmul2.y", "hfma2.y", "h2div.y", "hmax2.y", "p*q+r", "hcmadd.x", "hcmadd.y", "compare",
             "pair compare"]
    inputs = list(zip(a, b, c))
    for col, want in arith_reference(fmt, a, b, c).items():
        if columns is not None and col not in columns:
            continue
        if col in (9, 10, 19, 31, 32):  # bit operations (a NaN becomes 0x7FFF, as on an H100), flags
            assert_bits(out[:, col], want, f"{op} {names[col]}", inputs)
        else:
            assert_bits16(fmt, out[:, col], want, f"{op} {names[col]}", inputs)
    nan_cols = [k for k in (0, 1, 2, 3, 4, 7, 8, 9, 10, 11) if columns is None or k in columns]
    res = out[:, nan_cols]
    assert np.all(res[(res & 0x7FFF) > fmt.inf] == 0x7FFF), "NaN results must be the canonical 0x7FFF"


def test_half_arithmetic(probe):
    # Any half operands: a*b is exact in float64 and a*b + c rounds correctly from float64.
    n = 100_000
    s = special16(HALF)
    grid = np.array(np.meshgrid(s, s, s[::3])).reshape(3, -1)
    a, b, c = (np.concatenate([random_bits16(n), g]) for g in grid)
    check_arith(probe, "h_arith", HALF, a, b, c)


def bf16_moderate(n: int) -> np.ndarray:
    """bfloat16 patterns with |x| in [2^-8, 2^9): sums and fmas of them are exact in float64."""
    exp = RNG.integers(127 - 8, 127 + 9, n)
    return ((RNG.integers(0, 2, n) << 15) | (exp << 7) | RNG.integers(0, 128, n)).astype(np.uint16)


def test_bfloat16_arithmetic(probe):
    n = 80_000
    a, b, c = bf16_moderate(n), bf16_moderate(n), bf16_moderate(n)
    check_arith(probe, "b_arith", BF16, a, b, c)
    # Any bfloat16 operands, specials included: every column but the fused ones (whose float64
    # reference could round twice) -- those are covered exactly by test_fma_exact.
    s = special16(BF16)
    grid = np.array(np.meshgrid(s, s, s[::3])).reshape(3, -1)
    a, b, c = (np.concatenate([random_bits16(n), g]) for g in grid)
    check_arith(probe, "b_arith", BF16, a, b, c, columns=set(range(33)) - {4, 12, 13, 25, 29, 30})


@pytest.mark.parametrize("fmt,op", [(HALF, "h_arith"), (BF16, "b_arith")], ids=["half", "bfloat16"])
def test_fma_exact(probe, fmt, op):
    """__hfma rounds a*b + c once: products on a rounding midpoint plus a tiny c must round away
    from the tie (a double-rounding implementation ties to even instead)."""
    mb = 10 if fmt is HALF else 7
    rows = []
    for _ in range(1500):
        # a * b = 1.5 * (1 + k 2^-mb) lands on a midpoint of the grid when k is odd.
        a = round16(fmt, 1.5 * 2.0 ** RNG.integers(-3, 4))
        b = round16(fmt, (1 + RNG.integers(0, 1 << mb) * 2.0**-mb) * 2.0 ** RNG.integers(-3, 4))
        tiny = RNG.choice([2.0**-24, 2.0**-20, 2.0**-14, 2.0**-100, 2.0**-133, 1e-30, 0.0])
        c = round16(fmt, tiny * RNG.choice([-1, 1]))
        if RNG.random() < 0.3:  # and fully random operands
            a, b, c = random_bits16(3)
        rows.append((int(a), int(b), int(c)))
    a, b, c = (np.array(x, np.uint16) for x in zip(*rows))
    out = probe(op, np.stack([a, b, c], axis=1), np.uint16, 34)
    fa, fb, fc = fmt.decode(a), fmt.decode(b), fmt.decode(c)
    for i in range(len(a)):
        if not (np.isfinite(fa[i]) and np.isfinite(fb[i]) and np.isfinite(fc[i])):
            continue
        p, cc = Fraction(fa[i]) * Fraction(fb[i]), Fraction(fc[i])
        neg_zero = zero_sum_neg(bool(np.signbit(fa[i]) ^ np.signbit(fb[i])), bool(np.signbit(fc[i])), p == 0, cc == 0, "rn")
        want = round16_exact(fmt, p + cc, "rn", neg_zero)
        assert out[i, 4] == want, f"__hfma({a[i]:#06x}, {b[i]:#06x}, {c[i]:#06x}) = {out[i, 4]:#06x}, want {want:#06x}"


def math_reference(fmt: Fmt16, bits):
    x = fmt.decode(bits)
    with np.errstate(all="ignore"):
        fns = [np.exp(x), np.exp2(x), 10.0**x, np.log(x), np.log2(x), np.log10(x), np.sqrt(x), 1 / np.sqrt(x),
               1 / x, np.sin(x), np.cos(x), np.tanh(x), np.ceil(x), np.floor(x), np.trunc(x), np.rint(x)]
    return [round16(fmt, f) for f in fns]


@pytest.mark.parametrize("fmt,op", [(HALF, "h_math"), (BF16, "b_math")], ids=["half", "bfloat16"])
def test_math_functions_exhaustive(probe, fmt, op):
    """hexp, hlog, hsqrt, ... on every 16-bit input: the correctly rounded value (within 1 ulp
    where float64 libm results could differ between NumPy and glibc, which is rare)."""
    names = ["hexp", "hexp2", "hexp10", "hlog", "hlog2", "hlog10", "hsqrt", "hrsqrt", "hrcp", "hsin", "hcos",
             "htanh", "hceil", "hfloor", "htrunc", "hrint"]
    bits = np.arange(1 << 16, dtype=np.uint16)
    out = probe(op, bits, np.uint16, 18)
    assert np.all(out[:, 16] == 1), "h2* pair functions must agree with the scalar ones"
    key = lambda v: np.where(v & 0x8000, -(v.astype(np.int64) & 0x7FFF), v.astype(np.int64))  # noqa: E731
    for col, (name, want) in enumerate(zip(names, math_reference(fmt, bits))):
        got = out[:, col]
        nan_got, nan_want = (got & 0x7FFF) > fmt.inf, (want & 0x7FFF) > fmt.inf
        assert_bits(nan_got, nan_want, f"{name} NaN", bits)
        ok = nan_got | (np.abs(key(got) - key(want)) <= (0 if name in {"hsqrt", "hrcp", "hceil", "hfloor", "htrunc", "hrint"} else 1))
        assert_bits(ok, np.ones_like(ok), f"{name} (1 ulp)", bits)
        assert np.mean(got == want) > 0.999, f"{name}: too many 1-ulp differences"


def test_16bit_to_integer_conversions(probe):
    bits = np.arange(1 << 16, dtype=np.uint16)
    out = probe("h2i", bits, np.int64, 14)
    rnd = {"rn": np.rint, "rz": np.trunc, "ru": np.ceil, "rd": np.floor}

    def conv(x, mode, lo, hi, nan=0):
        with np.errstate(invalid="ignore"):
            r = np.clip(rnd[mode](x), lo, hi)
        return np.where(np.isnan(x), nan, np.nan_to_num(r)).astype(np.float64)

    i64min = -(2**63)
    h, b = HALF.decode(bits), BF16.decode(bits)
    i32, u32 = (-(2**31), 2**31 - 1), (0, 2**32 - 1)
    cols = [conv(h, "rn", *i32), conv(h, "rz", *i32), conv(h, "ru", *i32), conv(h, "rd", *i32), conv(h, "rn", *u32),
            conv(h, "rn", -32768, 32767), conv(h, "rz", 0, 65535), conv(h, "rz", -(2**63), 2**63 - 1, i64min),
            conv(h, "rz", -128, 127), conv(h, "rz", *i32), conv(b, "rn", *i32), conv(b, "rz", -32768, 32767),
            conv(b, "rd", *u32), conv(b, "ru", -(2**63), 2**63 - 1, i64min)]
    names = ["__half2int_rn", "__half2int_rz", "__half2int_ru", "__half2int_rd", "__half2uint_rn", "__half2short_rn",
             "__half2ushort_rz", "__half2ll_rz", "__half2char_rz", "int(__half)", "__bfloat162int_rn",
             "__bfloat162short_rz", "__bfloat162uint_rd", "__bfloat162ll_ru"]
    for col, (name, want) in enumerate(zip(names, cols)):
        w = np.array([int(v) if abs(v) < 2**63 else (2**63 - 1 if v > 0 else i64min) for v in want], np.int64)
        assert_bits(out[:, col], w, name, bits)


def test_integer_to_16bit_conversions(probe):
    vals = [0, 1, -1, 2047, 2049, 4097, 65504, 65519, 65520, 65535, 65536, -65520, 2**31 - 1, -(2**31),
            2**24 + 1, 255, 257, 383, 385, 2**63 - 1, -(2**63), 2**62 + 2**54 + 1, 2**40 + 2**32]
    rand = (RNG.integers(-(2**63), 2**63 - 1, 800, dtype=np.int64, endpoint=True) >> RNG.integers(0, 63, 800))
    v = np.concatenate([np.array(vals, np.int64), rand])
    out = probe("i2h", v, np.uint16, 16)
    i32 = lambda x: (int(x) + 2**31) % 2**32 - 2**31  # noqa: E731
    u64 = lambda x: int(x) % 2**64  # noqa: E731
    cols = [(HALF, i32, m) for m in MODES] + [(HALF, int, "rn"), (HALF, int, "rd"), (HALF, u64, "ru"), (HALF, int, "rn")]
    cols += [(BF16, i32, m) for m in MODES] + [(BF16, int, "rn"), (BF16, int, "rz"), (BF16, u64, "rn"), (BF16, u64, "ru")]
    for col, (fmt, src, mode) in enumerate(cols):
        want = np.array([round16_exact(fmt, Fraction(src(x)), mode) for x in v], np.uint16)
        assert_bits(out[:, col], want, f"integer -> 16-bit column {col} ({mode})", v)


# ================================================================================================
# float intrinsics
# ================================================================================================
def ulp32(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Distance in float32 ulps (+0 and -0 coincide; NaN vs NaN is 0, NaN vs number is huge)."""
    def key(x):
        i = x.astype(np.float32).view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)
    d = np.abs(key(got) - key(want))
    both_nan = np.isnan(got) & np.isnan(want)
    return np.where(both_nan, 0, np.where(np.isnan(got) | np.isnan(want), 1 << 40, d))


def test_float_math_functions(probe):
    n = 4000
    x = np.concatenate([RNG.uniform(-30, 30, n), RNG.choice([-1, 1], n) * 10.0 ** RNG.uniform(-30, 30, n),
                        np.arange(-10, 10.5, 0.5), [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, 88.7, -103.0, 0.0]])
    y = np.concatenate([RNG.uniform(0.1, 5, n), RNG.uniform(-3, 3, n), np.full(x.size - 2 * n, 1.5)])
    x, y = x.astype(np.float32), y.astype(np.float32)
    x[-1] = np.uint32(0x7F800001).view(np.float32)  # a signalling NaN: min/max return the other operand
    out = probe("f_math", np.stack([x, y, x], axis=1), np.float32, 34)
    with np.errstate(all="ignore"):
        X, Y = x.astype(np.float64), y.astype(np.float64)
        r = np.fmod(X, 2.0)  # exact
        sinpi = np.where(r == np.trunc(r), np.copysign(0.0, X), np.sin(np.pi * r))
        cospi = np.where(np.abs(r) % 1 == 0.5, 0.0, np.cos(np.pi * r))
        norm = np.where(np.isinf(X) | np.isinf(Y), np.inf, np.sqrt(2 * X * X + Y * Y))
        normcdf = np.vectorize(lambda v: 0.5 * math.erfc(-v / math.sqrt(2)))(X)
        ref = [np.exp(X), 10**X, 10**X, np.log(X), np.log2(X), np.log10(X), X**Y, np.sin(X), np.cos(X), np.tan(X),
               np.sin(X), np.cos(X), np.sin(X), np.cos(X), 1 / np.sqrt(X), 1 / np.sqrt(X), X / Y, X / Y, 1 / X,
               np.sqrt(X), sinpi, cospi, sinpi, cospi, norm, 1 / norm, 1 / np.cbrt(X),
               np.where(X >= 1, 1.0, np.where(X > 0, X, 0.0)), np.exp2(X), normcdf, np.fmin(X, Y), np.fmax(X, Y),
               1 / np.sqrt(X), 10**X]
        ref = [np.asarray(v).astype(np.float32) for v in ref]
    names = ["__expf", "__exp10f", "exp10f", "__logf", "__log2f", "__log10f", "__powf", "__sinf", "__cosf", "__tanf",
             "sincosf.s", "sincosf.c", "__sincosf.s", "__sincosf.c", "rsqrtf", "__frsqrt_rn", "__fdividef",
             "fdividef", "__frcp_rn", "__fsqrt_rn", "sinpif", "cospif", "sincospif.s", "sincospif.c", "norm3df",
             "rnorm3df", "rcbrtf", "__saturatef", "exp2f", "normcdff", "min(float, float)", "max(float, float)",
             "rsqrt", "exp10"]
    exact = {"__frsqrt_rn", "__fdividef", "fdividef", "__frcp_rn", "__fsqrt_rn", "__saturatef", "min(float, float)",
             "max(float, float)"}
    for col, (name, want) in enumerate(zip(names, ref)):
        d = ulp32(out[:, col], want)
        tol = 0 if name in exact else 2
        bad = np.flatnonzero(d > tol)
        assert bad.size == 0, (f"{name}: {bad.size} results beyond {tol} ulp, e.g. x={x[bad[0]]!r} y={y[bad[0]]!r}: "
                               f"got {out[bad[0], col]!r}, want {want[bad[0]]!r}")
    assert np.all(out[np.isnan(x), 27] == 0), "__saturatef(NaN) is +0"
    assert out[-1, 30] == y[-1] and out[-1, 31] == y[-1], "min/max of a signalling NaN and y is y"


def random_floats(n: int, lo: int, hi: int) -> np.ndarray:
    return (RNG.choice([-1.0, 1.0], n) * RNG.uniform(1, 2, n) * 2.0 ** RNG.integers(lo, hi, n)).astype(np.float32)


def test_directed_rounding_float(probe):
    """__fadd_rz, __fmul_ru, __fmaf_rd, __fdiv_*, __fsqrt_*, __frcp_*: exact rounding (Fractions)."""
    n = 500
    a = np.concatenate([random_floats(n, -20, 20), random_floats(100, -149, -120), random_floats(100, 100, 128),
                        np.float32([0.0, -0.0, 1.0, -1.0, 3.0, np.inf, np.nan, 1e-45, 3.4028235e38, 2.0, 5.0, 5.0])])
    b = np.concatenate([random_floats(n, -20, 20), random_floats(100, -20, 20), random_floats(100, 0, 128),
                        np.float32([-0.0, -0.0, -1.0, 1.0, 0.0, 1.0, 1.0, 0.5, 2.0, 3.0, -5.0, 3.0])])
    c = np.concatenate([random_floats(n, -40, 20), random_floats(100, -149, -100), random_floats(100, 100, 128),
                        np.float32([0.0, 0.0, 1.0, 1.0, -0.0, 0.0, 0.0, 0.0, -1.0, -6.0, 25.0, -15.0])])
    out = probe("f_round", np.stack([a, b, c], axis=1), np.float32, 28)
    ops = ["__fadd", "__fsub", "__fmul", "__fdiv", "__fmaf", "__fsqrt", "__frcp"]
    for i in range(a.size):
        A, B, C = (Fraction(float(v)) if np.isfinite(v) else None for v in (a[i], b[i], c[i]))
        sa, sb, sc = (bool(np.signbit(v)) for v in (a[i], b[i], c[i]))
        for m, mode in enumerate(("rz", "ru", "rd", "rn")):
            with np.errstate(all="ignore"):
                ieee = [a[i] + b[i], a[i] - b[i], a[i] * b[i], a[i] / b[i],
                        np.float32(np.float64(a[i]) * np.float64(b[i]) + np.float64(c[i])), np.sqrt(a[i]),
                        np.float32(1) / a[i]]
            for k, op in enumerate(ops):
                want = None
                if A is not None and B is not None and C is not None:
                    if op == "__fadd":
                        want = round_fraction(np.float32, A + B, mode, zero_sum_neg(sa, sb, A == 0, B == 0, mode))
                    elif op == "__fsub":
                        want = round_fraction(np.float32, A - B, mode, zero_sum_neg(sa, not sb, A == 0, B == 0, mode))
                    elif op == "__fmul":
                        want = round_fraction(np.float32, A * B, mode, sa != sb)
                    elif op == "__fdiv" and B != 0:
                        want = round_fraction(np.float32, A / B, mode, sa != sb)
                    elif op == "__fmaf":
                        want = round_fraction(np.float32, A * B + C, mode,
                                              zero_sum_neg(sa != sb, sc, A * B == 0, C == 0, mode))
                    elif op == "__fsqrt" and A > 0:
                        want = round_sqrt(np.float32, A, mode)
                    elif op == "__frcp" and A != 0:
                        want = round_fraction(np.float32, 1 / A, mode, sa)
                if want is None:  # infinities, NaN, x/0, sqrt(<=0): exact in every mode
                    want = ieee[k]
                got = out[i, 7 * m + k]
                assert same_float(got, want), f"{op}_{mode}({a[i]!r}, {b[i]!r}, {c[i]!r}) = {got!r}, want {want!r}"


def test_directed_rounding_double(probe):
    n = 600
    a = np.concatenate([RNG.uniform(1, 2, n) * 2.0 ** RNG.integers(-60, 60, n) * RNG.choice([-1, 1], n),
                        [1.0, 3.0, 0.0, 1e-320, 3.4028235677973366e38, 1e39, -1e-50]])
    b = np.concatenate([RNG.uniform(1, 2, n) * 2.0 ** RNG.integers(-60, 60, n) * RNG.choice([-1, 1], n),
                        [-1.0, 7.0, -0.0, 3.0, 1.0, 1.0, 1.0]])
    out = probe("d_round", np.stack([a, b], axis=1), np.float64, 21)
    for i in range(a.size):
        A, B = Fraction(a[i]), Fraction(b[i])
        sa, sb = bool(np.signbit(a[i])), bool(np.signbit(b[i]))
        for m, mode in enumerate(("rz", "ru", "rd")):
            want = [round_fraction(np.float64, A + B, mode, zero_sum_neg(sa, sb, A == 0, B == 0, mode)),
                    round_fraction(np.float64, A - B, mode, zero_sum_neg(sa, not sb, A == 0, B == 0, mode)),
                    round_fraction(np.float64, A * B, mode, sa != sb),
                    round_fraction(np.float64, A / B, mode, sa != sb) if B else None,
                    round_sqrt(np.float64, A, mode) if A > 0 else None,
                    round_fraction(np.float64, 1 / A, mode, sa) if A else None]
            for k, w in enumerate(want):
                if w is not None:
                    got = out[i, 6 * m + k]
                    assert same_float(got, w), f"double op {k} {mode}({a[i]!r}, {b[i]!r}) = {got!r}, want {w!r}"
            w = round_fraction(np.float32, A, mode, sa)
            assert same_float(np.float32(out[i, 18 + m]), w), f"__double2float_{mode}({a[i]!r})"


def test_float_to_integer_conversions(probe):
    x = np.concatenate([RNG.uniform(-10, 10, 3000), RNG.uniform(-3e9, 5e9, 2000),
                        RNG.choice([-1, 1], 2000) * 10.0 ** RNG.uniform(0, 20, 2000),
                        np.arange(-5, 5.5, 0.5), [np.nan, np.inf, -np.inf, 2**31, -(2**31), 2**32, 2**63, -(2**63), 2**64,
                                                  -0.0, 0.49999997, 2147483520.0, 9.2233715e18]]).astype(np.float32)
    out = probe("f2i", x, np.int64, 14)
    X = x.astype(np.float64)
    rnd = {"rn": np.rint, "rz": np.trunc, "ru": np.ceil, "rd": np.floor}
    i32, u32, i64, u64 = (-(2**31), 2**31 - 1), (0, 2**32 - 1), (-(2**63), 2**63 - 1), (0, 2**64 - 1)

    def conv(v, mode, rng, nan=0):
        r = rnd[mode](v)
        res = []
        for val in r:
            if np.isnan(val):
                res.append(nan)
            else:
                res.append(min(max(int(val), rng[0]), rng[1]) if np.isfinite(val) else (rng[1] if val > 0 else rng[0]))
        return np.array([(v + 2**63) % 2**64 - 2**63 for v in res], np.int64)  # unsigned results as their bits

    nan64 = -(2**63)
    cols = [conv(X, "rn", i32), conv(X, "rz", i32), conv(X, "ru", i32), conv(X, "rd", i32), conv(X, "rn", u32),
            conv(X, "rz", u32), conv(X, "rn", i64, nan64), conv(X, "rd", i64, nan64), conv(X, "rz", u64, nan64),
            conv(3 * X, "rn", i32, -(2**31)), conv(3 * X, "ru", u32, 2**31), conv(3 * X, "rz", i64, nan64),
            x.view(np.int32).astype(np.int64), x.view(np.uint32).astype(np.int64)]
    names = ["__float2int_rn", "__float2int_rz", "__float2int_ru", "__float2int_rd", "__float2uint_rn",
             "__float2uint_rz", "__float2ll_rn", "__float2ll_rd", "__float2ull_rz", "__double2int_rn",
             "__double2uint_ru", "__double2ll_rz", "__float_as_int", "__float_as_uint"]
    for col, (name, want) in enumerate(zip(names, cols)):
        assert_bits(out[:, col], want, name, x)


def test_integer_to_float_conversions(probe):
    vals = [0, 1, -1, 2**24 + 1, 2**24 + 3, -(2**24) - 1, 2**31 - 1, -(2**31), 2**53 + 1, 2**63 - 1, -(2**63),
            2**62 + 2**38 + 1, -(2**62) - 2**39 - 1]
    v = np.concatenate([np.array(vals, np.int64),
                        RNG.integers(-(2**63), 2**63 - 1, 600, dtype=np.int64, endpoint=True) >> RNG.integers(0, 63, 600)])
    out = probe("i2f", v, np.float64, 16)
    i32 = lambda x: (int(x) + 2**31) % 2**32 - 2**31  # noqa: E731
    u32 = lambda x: int(x) % 2**32  # noqa: E731
    u64 = lambda x: int(x) % 2**64  # noqa: E731
    f32, f64 = np.float32, np.float64
    cols = [(f32, i32, m) for m in MODES] + [(f32, u32, "rz"), (f32, u32, "ru")] + [(f32, int, m) for m in MODES]
    cols += [(f32, u64, "rn"), (f32, u64, "rd"), (f64, int, "rz"), (f64, int, "ru"), (f64, u64, "rd"), (f64, i32, "rn")]
    for col, (dtype, src, mode) in enumerate(cols):
        for i, x in enumerate(v):
            want = round_fraction(dtype, Fraction(src(x)), mode)
            assert same_float(dtype(out[i, col]), want), f"column {col} ({dtype.__name__} {mode}) of {int(x)}"


# ================================================================================================
# integer intrinsics
# ================================================================================================
def s32(x: int) -> int:
    return (x + 2**31) % 2**32 - 2**31


def int32_reference(x: int, y: int, s: int) -> list[int]:
    xi, yi, si = s32(x), s32(y), s32(s)
    m32 = 2**32 - 1
    v = (y << 32) | x
    sext24 = lambda t: (t & 0xFFFFFF) - ((t & 0x800000) << 1)  # noqa: E731
    sbyte = lambda t, k: ((t >> (8 * k)) & 0xFF) - (((t >> (8 * k)) & 0x80) << 1)  # noqa: E731
    return [r & m32 for r in [
        32 - x.bit_length(), bin(x).count("1"), (x & -x).bit_length(), int(f"{x:032b}"[::-1], 2),
        sum(((v >> (8 * ((s >> (4 * k)) & 7))) & 0xFF) << (8 * k) for k in range(4)),
        (v << (s & 31)) >> 32, (v << min(s, 32)) >> 32, v >> (s & 31), v >> min(s, 32),
        sext24(x) * sext24(y), (x & 0xFFFFFF) * (y & 0xFFFFFF), (xi * yi) >> 32, (x * y) >> 32,
        abs(xi - yi) + s, abs(x - y) + s, (xi + yi) >> 1, (xi + yi + 1) >> 1, (x + y) >> 1, (x + y + 1) >> 1,
        sum(sbyte(x, k) * sbyte(y, k) for k in range(4)) + si,
        sum(((x >> (8 * k)) & 0xFF) * ((y >> (8 * k)) & 0xFF) for k in range(4)) + s,
        min(xi, yi), min(x, y), max(xi, yi)]]


def test_int32_intrinsics(probe):
    n = 3000
    w = RNG.integers(0, 2**32, (n, 3), dtype=np.uint64)
    w[:, 2] = np.where(np.arange(n) % 2, w[:, 2] % 64, w[:, 2])  # shifts in and beyond 0..31
    edge = [0, 1, 2**31, 2**32 - 1, 0x7FFFFF, 0x800000, 0xFFFFFF, 0x12345678, 32, 33]
    w = np.concatenate([w, np.array([(a, b, c) for a in edge for b in edge for c in (0, 1, 31, 32, 0x3210, 0x7654)],
                                    np.uint64)]).astype(np.uint32)
    out = probe("int32", w, np.uint32, 24)
    names = ["__clz", "__popc", "__ffs", "__brev", "__byte_perm", "__funnelshift_l", "__funnelshift_lc",
             "__funnelshift_r", "__funnelshift_rc", "__mul24", "__umul24", "__mulhi", "__umulhi", "__sad", "__usad",
             "__hadd", "__rhadd", "__uhadd", "__urhadd", "__dp4a(int)", "__dp4a(unsigned)", "min(int, int)",
             "min(int, unsigned)", "max(int, int)"]
    want = np.array([int32_reference(int(a), int(b), int(c)) for a, b, c in w], np.uint32)
    for col, name in enumerate(names):
        assert_bits(out[:, col], want[:, col], name, [tuple(map(hex, r)) for r in w])


def test_int64_intrinsics(probe):
    n = 2000
    w = RNG.integers(0, 2**64, (n, 2), dtype=np.uint64, endpoint=False) >> RNG.integers(0, 64, (n, 2)).astype(np.uint64)
    w = np.concatenate([w, np.array([[0, 0], [2**63, 2**63], [2**64 - 1, 1], [1, 2**64 - 1]], np.uint64)])
    out = probe("int64", w, np.uint64, 8)
    m64 = 2**64 - 1
    s64 = lambda t: (t + 2**63) % 2**64 - 2**63  # noqa: E731
    for i, (x, y) in enumerate(w.tolist()):
        want = [64 - x.bit_length(), bin(x).count("1"), (x & -x).bit_length(), int(f"{x:064b}"[::-1], 2),
                (s64(x) * s64(y)) >> 64, (x * y) >> 64, min(s64(x), s64(y)), max(x, y)]
        assert [int(v) for v in out[i]] == [v & m64 for v in want], f"64-bit intrinsics of {x:#x}, {y:#x}"

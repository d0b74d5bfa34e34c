// cuda_fp16.h for the CPU emulator: __half / __half2 with the API of CUDA's header, so kernels
// that #include <cuda_fp16.h> compile with g++ as they do with NVRTC.
//
// __half stores the IEEE binary16 bit pattern. Conversions round exactly as the GPU does
// (round-to-nearest-even unless the name says _rz/_ru/_rd; a NaN becomes the canonical 0x7FFF;
// conversions to integers saturate, NaN -> 0, or 0x8000000000000000 for 64-bit ones).
// Arithmetic (__hadd, __hmul, __hfma, ...) computes in double and rounds once, which gives the
// correctly rounded result the GPU's add/mul/fma.rn.f16 produce. Math functions (hexp, hlog,
// hsin, htanh, ...) return the correctly rounded value of the function. Checked against an H100
// on every 16-bit input (math functions) and 10^5-10^6 random ones (the rest): bit-identical,
// except htanh_approx, which the GPU approximates within an ulp. One difference remains by
// design: nvcc contracts `a * b + c` on __half/__half2 operators into one fma; g++ does not.
//
// The same machinery serves __nv_bfloat16 (cuda_bf16.h includes this header, as CUDA's does):
// the generic 16-bit helpers below take the format's exponent and fraction widths, and
// EMU_F16_API stamps out the overloaded API (__hadd, hexp, __heq2, operators, ...) per type.
//
// Honoured like CUDA: __CUDA_NO_HALF_CONVERSIONS__, __CUDA_NO_HALF_OPERATORS__,
// __CUDA_NO_HALF2_OPERATORS__ (and the BFLOAT16 spellings in cuda_bf16.h).
#pragma once
#include "emu_math.hpp"

// ---------------------------------------------------------------------------------------------
// Generic 16-bit float helpers (binary16: 5 exponent / 10 fraction bits; bfloat16: 8 / 7)
// ---------------------------------------------------------------------------------------------
namespace emu_math {

// Round d to the format in mode M and return its bit pattern. One rounding from the exact
// double, so float -> 16-bit and double -> 16-bit conversions are both correctly rounded.
template <int EB, int MB, rnd M = rnd::rn>
constexpr unsigned short round_to_bits(double d) {
    constexpr int bias = (1 << (EB - 1)) - 1;
    constexpr unsigned inf = ((1u << EB) - 1) << MB;
    const unsigned long long u = std::bit_cast<unsigned long long>(d);
    const unsigned sign = static_cast<unsigned>(u >> 63) << 15;
    const int e = static_cast<int>((u >> 52) & 0x7FF);
    unsigned long long m = u & ((1ull << 52) - 1);
    if (e == 0x7FF) return static_cast<unsigned short>(m ? 0x7FFFu : sign | inf);  // canonical NaN, like the GPU
    const bool away = sign ? M == rnd::rd : M == rnd::ru;  // directed modes that round |d| up
    int exp = e - 1023;  // |d| = m * 2^(exp - 52)
    if (e) m |= 1ull << 52; else exp = -1022;
    if (exp > bias)  // |d| >= 2^(bias + 1): overflow to inf, or to the largest finite value
        return static_cast<unsigned short>(sign | (M == rnd::rn || away ? inf : inf - 1));
    // Drop the bits below the format's last fraction bit (more of them in the subnormal range).
    int shift = 52 - MB + (exp < 1 - bias ? 1 - bias - exp : 0);
    if (shift > 63) shift = 63;  // m < 2^53: all of it is dropped, only its sign of inexactness matters
    unsigned long long q = m >> shift;
    const unsigned long long rem = m & ((1ull << shift) - 1), half = 1ull << (shift - 1);
    if (M == rnd::rn ? rem > half || (rem == half && (q & 1)) : rem != 0 && away) ++q;
    // Normal: q holds the implicit bit, so adding it to (exponent - 1) << MB carries correctly
    // (also into the next binade, and from the largest finite value into inf).
    const unsigned bits = exp >= 1 - bias ? (static_cast<unsigned>(exp + bias - 1) << MB) + static_cast<unsigned>(q)
                                          : static_cast<unsigned>(q);
    return static_cast<unsigned short>(sign | bits);
}

// The exact float value of a 16-bit pattern. A binary16 NaN becomes the canonical float NaN
// 0x7FFFFFFF (as CUDA's __half2float); bfloat16 keeps its bits (the top half of a float).
template <int EB, int MB>
constexpr float bits_to_float(unsigned short h) {
    if constexpr (EB == 8) {  // bfloat16 is the top half of a float
        return std::bit_cast<float>(static_cast<unsigned int>(h) << 16);
    } else {
        constexpr int bias = (1 << (EB - 1)) - 1, emax = (1 << EB) - 1;
        const int e = (h >> MB) & emax;
        const unsigned f = h & ((1u << MB) - 1);
        const unsigned sign = (h & 0x8000u) << 16;
        if (e == emax) return std::bit_cast<float>(f ? 0x7FFFFFFFu : sign | 0x7F800000u);
        // (implicit bit + fraction) * 2^(exponent - bias - MB); subnormals use exponent 1
        const double scale = std::bit_cast<double>(static_cast<unsigned long long>(1023 + (e ? e : 1) - bias - MB) << 52);
        const float v = static_cast<float>(static_cast<double>(e ? (1u << MB) | f : f) * scale);
        return sign ? -v : v;
    }
}

// Round to odd: s = RN(x) and e = x - s; returns s with its last bit forced to 1 when x is
// inexact. Rounding this double to a 16-bit format (in any mode) equals rounding x itself,
// since double has more than 2 bits beyond the format's precision.
inline double sticky(double s, double e) {
    if (e == 0 || e != e || !std::isfinite(s)) return s;
    const unsigned long long b = std::bit_cast<unsigned long long>(s);
    if (b & 1) return s;
    return std::bit_cast<double>((e > 0) == (s > 0) ? b + 1 : b - 1);
}
// 64-bit integers do not fit a double exactly; 32-bit ones do.
template <class I>
inline double int_to_double_odd(I x) {
    if constexpr (sizeof(I) <= 4) {
        return static_cast<double>(x);
    } else {
        const double hi = static_cast<double>(x);
        return sticky(hi, static_cast<double>(static_cast<int128>(x) - static_cast<int128>(hi)));
    }
}
// a*b + c for 16-bit operands: the product is exact in double, the sum is made round-to-odd.
inline double fma_odd(double a, double b, double c) {
    double s, e;
    two_sum(a * b, c, s, e);
    return sticky(s, e);
}
// Clamp to [+0, 1], NaN -> +0 (the _sat intrinsics); relu for the _relu ones (NaN stays NaN).
inline double sat01(double x) { return x >= 1.0 ? 1.0 : (x > 0.0 ? x : 0.0); }
inline double relu(double x) { return x != x ? x : (x > 0.0 ? x : 0.0); }

// Per-type access, specialised by each 16-bit type: EB/MB and its raw struct.
template <class T> struct f16_traits;
template <class T> constexpr unsigned short to_bits(T h) { return static_cast<typename f16_traits<T>::raw>(h).x; }
template <class T> constexpr T from_bits(unsigned short b) { return T(typename f16_traits<T>::raw{b}); }
template <class T, rnd M = rnd::rn> constexpr T round_to(double d) {
    return from_bits<T>(round_to_bits<f16_traits<T>::EB, f16_traits<T>::MB, M>(d));
}
template <class T> constexpr float to_float(T h) {
    return bits_to_float<f16_traits<T>::EB, f16_traits<T>::MB>(to_bits(h));
}

}  // namespace emu_math

// ---------------------------------------------------------------------------------------------
// Members shared by __half and __nv_bfloat16 (inside the struct; __x holds the bits): implicit
// conversions from and to float, double and the integer types, as CUDA has them when
// compiling with nvcc/NVRTC. Integers convert to the type with round-to-nearest-even and from
// it toward zero, saturating.
// ---------------------------------------------------------------------------------------------
#define EMU_F16_CONVERSION_MEMBERS(T, EB, MB)                                                          \
    constexpr T(float f) : __x(::emu_math::round_to_bits<EB, MB>(f)) {}                               \
    constexpr T(double f) : __x(::emu_math::round_to_bits<EB, MB>(f)) {}                              \
    T(short v) : __x(::emu_math::round_to_bits<EB, MB>(v)) {}                                         \
    T(unsigned short v) : __x(::emu_math::round_to_bits<EB, MB>(v)) {}                                \
    T(int v) : __x(::emu_math::round_to_bits<EB, MB>(v)) {}                                           \
    T(unsigned int v) : __x(::emu_math::round_to_bits<EB, MB>(v)) {}                                  \
    T(long v) : __x(::emu_math::round_to_bits<EB, MB>(::emu_math::int_to_double_odd(v))) {}            \
    T(unsigned long v) : __x(::emu_math::round_to_bits<EB, MB>(::emu_math::int_to_double_odd(v))) {}   \
    T(long long v) : __x(::emu_math::round_to_bits<EB, MB>(::emu_math::int_to_double_odd(v))) {}       \
    T(unsigned long long v) : __x(::emu_math::round_to_bits<EB, MB>(::emu_math::int_to_double_odd(v))) {} \
    T& operator=(float f) { return *this = T(f); }                                                     \
    T& operator=(double f) { return *this = T(f); }                                                    \
    T& operator=(short v) { return *this = T(v); }                                                     \
    T& operator=(unsigned short v) { return *this = T(v); }                                            \
    T& operator=(int v) { return *this = T(v); }                                                       \
    T& operator=(unsigned int v) { return *this = T(v); }                                              \
    T& operator=(long long v) { return *this = T(v); }                                                 \
    T& operator=(unsigned long long v) { return *this = T(v); }                                        \
    constexpr operator float() const { return ::emu_math::bits_to_float<EB, MB>(__x); }               \
    operator signed char() const { return to_int<signed char>(); }                                     \
    operator unsigned char() const { return to_int<unsigned char>(); }                                 \
    operator char() const { return to_int<char>(); }                                                   \
    operator short() const { return to_int<short>(); }                                                 \
    operator unsigned short() const { return to_int<unsigned short>(); }                               \
    operator int() const { return to_int<int>(); }                                                     \
    operator unsigned int() const { return to_int<unsigned int>(); }                                   \
    operator long() const { return to_int<long>(); }                                                   \
    operator unsigned long() const { return to_int<unsigned long>(); }                                 \
    operator long long() const { return to_int<long long>(); }                                         \
    operator unsigned long long() const { return to_int<unsigned long long>(); }                       \
    constexpr operator bool() const { return (__x & 0x7FFFu) != 0; }                                   \
                                                                                                       \
private:                                                                                               \
    template <class I> I to_int() const {                                                              \
        return ::emu_math::to_int<I, ::emu_math::rnd::rz>(::emu_math::bits_to_float<EB, MB>(__x));     \
    }                                                                                                  \
public:

// ---------------------------------------------------------------------------------------------
// __half, __half2
// ---------------------------------------------------------------------------------------------
struct alignas(2) __half_raw { unsigned short x; };
struct alignas(4) __half2_raw { unsigned short x, y; };
struct __nv_bfloat16;

struct alignas(2) __half {
protected:
    unsigned short __x;  // binary16 bits

public:
    __half() = default;
    constexpr __half(const __half_raw& r) : __x(r.x) {}
    constexpr __half& operator=(const __half_raw& r) { __x = r.x; return *this; }
    constexpr operator __half_raw() const { return __half_raw{__x}; }
    explicit __half(__nv_bfloat16 b);  // defined in cuda_bf16.h
#ifndef __CUDA_NO_HALF_CONVERSIONS__
    EMU_F16_CONVERSION_MEMBERS(__half, 5, 10)
#endif
};

struct alignas(4) __half2 {
    __half x, y;
    __half2() = default;
    constexpr __half2(const __half& a, const __half& b) : x(a), y(b) {}
    constexpr __half2(const __half2_raw& r) : x(__half_raw{r.x}), y(__half_raw{r.y}) {}
    constexpr __half2& operator=(const __half2_raw& r) { return *this = __half2(r); }
    constexpr operator __half2_raw() const {
        return __half2_raw{static_cast<__half_raw>(x).x, static_cast<__half_raw>(y).x};
    }
};

template <> struct emu_math::f16_traits<__half> { static constexpr int EB = 5, MB = 10; using raw = __half_raw; };

// ---------------------------------------------------------------------------------------------
// The overloaded API, stamped out per 16-bit type. T: scalar type, T2: its pair, NAME: how
// CUDA spells the type inside conversion names (__float2half_rn / __float2bfloat16_rn).
// ---------------------------------------------------------------------------------------------
#define EMU_F16_ROUND(T, d) ::emu_math::round_to<T>(d)
#define EMU_F16_F(h) static_cast<double>(::emu_math::to_float(h))

// Conversions with an explicit rounding mode SUF (rn, rz, ru, rd).
#define EMU_F16_MODE_CONVERSIONS(T, NAME, SUF)                                                                    \
    inline T __float2##NAME##_##SUF(float f) { return ::emu_math::round_to<T, ::emu_math::rnd::SUF>(f); }         \
    inline T __int2##NAME##_##SUF(int v) { return ::emu_math::round_to<T, ::emu_math::rnd::SUF>(v); }             \
    inline T __uint2##NAME##_##SUF(unsigned int v) { return ::emu_math::round_to<T, ::emu_math::rnd::SUF>(v); }   \
    inline T __short2##NAME##_##SUF(short v) { return ::emu_math::round_to<T, ::emu_math::rnd::SUF>(v); }         \
    inline T __ushort2##NAME##_##SUF(unsigned short v) { return ::emu_math::round_to<T, ::emu_math::rnd::SUF>(v); } \
    inline T __ll2##NAME##_##SUF(long long v) {                                                                   \
        return ::emu_math::round_to<T, ::emu_math::rnd::SUF>(::emu_math::int_to_double_odd(v));                   \
    }                                                                                                             \
    inline T __ull2##NAME##_##SUF(unsigned long long v) {                                                         \
        return ::emu_math::round_to<T, ::emu_math::rnd::SUF>(::emu_math::int_to_double_odd(v));                   \
    }                                                                                                             \
    inline int __##NAME##2int_##SUF(T h) { return ::emu_math::to_int<int, ::emu_math::rnd::SUF>(::emu_math::to_float(h)); } \
    inline unsigned int __##NAME##2uint_##SUF(T h) {                                                              \
        return ::emu_math::to_int<unsigned int, ::emu_math::rnd::SUF>(::emu_math::to_float(h));                   \
    }                                                                                                             \
    inline short __##NAME##2short_##SUF(T h) { return ::emu_math::to_int<short, ::emu_math::rnd::SUF>(::emu_math::to_float(h)); } \
    inline unsigned short __##NAME##2ushort_##SUF(T h) {                                                          \
        return ::emu_math::to_int<unsigned short, ::emu_math::rnd::SUF>(::emu_math::to_float(h));                 \
    }                                                                                                             \
    inline long long __##NAME##2ll_##SUF(T h) {                                                                   \
        return ::emu_math::to_int<long long, ::emu_math::rnd::SUF>(::emu_math::to_float(h));                      \
    }                                                                                                             \
    inline unsigned long long __##NAME##2ull_##SUF(T h) {                                                         \
        return ::emu_math::to_int<unsigned long long, ::emu_math::rnd::SUF>(::emu_math::to_float(h));             \
    }

// Comparisons: __hOP (bool), __hOP2 (pair of 1.0/0.0), __hOP2_mask (0xFFFF per lane),
// __hbOP2 (true when both lanes are). x, y are the operands as float.
#define EMU_F16_CMP(T, T2, OP, EXPR)                                                                           \
    inline bool __h##OP(T a, T b) {                                                                            \
        const float x = ::emu_math::to_float(a), y = ::emu_math::to_float(b);                                 \
        return EXPR;                                                                                           \
    }                                                                                                          \
    inline T2 __h##OP##2(T2 a, T2 b) {                                                                         \
        return T2(EMU_F16_ROUND(T, __h##OP(a.x, b.x) ? 1.0 : 0.0), EMU_F16_ROUND(T, __h##OP(a.y, b.y) ? 1.0 : 0.0)); \
    }                                                                                                          \
    inline unsigned int __h##OP##2_mask(T2 a, T2 b) {                                                          \
        return (__h##OP(a.x, b.x) ? 0xFFFFu : 0u) | (__h##OP(a.y, b.y) ? 0xFFFF0000u : 0u);                    \
    }                                                                                                          \
    inline bool __hb##OP##2(T2 a, T2 b) { return __h##OP(a.x, b.x) && __h##OP(a.y, b.y); }

// Binary arithmetic on T (x, y: operands as double), and its lane-wise pair version.
#define EMU_F16_BINARY(T, T2, FN, FN2, EXPR)                                \
    inline T FN(T a, T b) {                                                 \
        const double x = EMU_F16_F(a), y = EMU_F16_F(b);                    \
        return EMU_F16_ROUND(T, EXPR);                                      \
    }                                                                       \
    inline T2 FN2(T2 a, T2 b) { return T2(FN(a.x, b.x), FN(a.y, b.y)); }

// Fused multiply-adds (r: a*b + c made round-to-odd, so one final rounding is exact).
#define EMU_F16_FMA(T, T2, FN, FN2, EXPR)                                                     \
    inline T FN(T a, T b, T c) {                                                              \
        const double r = ::emu_math::fma_odd(EMU_F16_F(a), EMU_F16_F(b), EMU_F16_F(c));       \
        return EMU_F16_ROUND(T, EXPR);                                                        \
    }                                                                                         \
    inline T2 FN2(T2 a, T2 b, T2 c) { return T2(FN(a.x, b.x, c.x), FN(a.y, b.y, c.y)); }

// Math functions hNAME / h2NAME (x: operand as double), correctly rounded.
#define EMU_F16_UNARY(T, T2, NAME, EXPR)                                  \
    inline T h##NAME(T a) {                                               \
        const double x = EMU_F16_F(a);                                    \
        return EMU_F16_ROUND(T, EXPR);                                    \
    }                                                                     \
    inline T2 h2##NAME(T2 a) { return T2(h##NAME(a.x), h##NAME(a.y)); }

#define EMU_F16_API(T, T2, NAME)                                                                        \
    /* bits */                                                                                          \
    inline constexpr short __##NAME##_as_short(T h) { return static_cast<short>(::emu_math::to_bits(h)); } \
    inline constexpr unsigned short __##NAME##_as_ushort(T h) { return ::emu_math::to_bits(h); }      \
    inline constexpr T __short_as_##NAME(short i) { return ::emu_math::from_bits<T>(static_cast<unsigned short>(i)); } \
    inline constexpr T __ushort_as_##NAME(unsigned short i) { return ::emu_math::from_bits<T>(i); }    \
    /* conversions */                                                                                   \
    inline T __float2##NAME(float f) { return EMU_F16_ROUND(T, f); }                                    \
    inline T __double2##NAME(double d) { return EMU_F16_ROUND(T, d); }                                  \
    inline float __##NAME##2float(T h) { return ::emu_math::to_float(h); }                              \
    EMU_F16_MODE_CONVERSIONS(T, NAME, rn)                                                               \
    EMU_F16_MODE_CONVERSIONS(T, NAME, rz)                                                               \
    EMU_F16_MODE_CONVERSIONS(T, NAME, ru)                                                               \
    EMU_F16_MODE_CONVERSIONS(T, NAME, rd)                                                               \
    inline signed char __##NAME##2char_rz(T h) {                                                        \
        return ::emu_math::to_int<signed char, ::emu_math::rnd::rz>(::emu_math::to_float(h));           \
    }                                                                                                   \
    inline unsigned char __##NAME##2uchar_rz(T h) {                                                     \
        return ::emu_math::to_int<unsigned char, ::emu_math::rnd::rz>(::emu_math::to_float(h));         \
    }                                                                                                   \
    /* pairs */                                                                                         \
    inline T2 __float2##NAME##2_rn(float f) { return T2(EMU_F16_ROUND(T, f), EMU_F16_ROUND(T, f)); }    \
    inline T2 __floats2##NAME##2_rn(float a, float b) { return T2(EMU_F16_ROUND(T, a), EMU_F16_ROUND(T, b)); } \
    inline T2 __float22##NAME##2_rn(float2 f) { return T2(EMU_F16_ROUND(T, f.x), EMU_F16_ROUND(T, f.y)); } \
    inline float2 __##NAME##22float2(T2 h) { return make_float2(::emu_math::to_float(h.x), ::emu_math::to_float(h.y)); } \
    inline T2 __##NAME##2##NAME##2(T h) { return T2(h, h); }                                            \
    inline T2 __halves2##NAME##2(T lo, T hi) { return T2(lo, hi); }                                     \
    inline T2 make_##NAME##2(T x, T y) { return T2(x, y); }                                             \
    inline T __low2##NAME(T2 h) { return h.x; }                                                         \
    inline T __high2##NAME(T2 h) { return h.y; }                                                        \
    inline T2 __low2##NAME##2(T2 h) { return T2(h.x, h.x); }                                            \
    inline T2 __high2##NAME##2(T2 h) { return T2(h.y, h.y); }                                           \
    inline T2 __lows2##NAME##2(T2 a, T2 b) { return T2(a.x, b.x); }                                     \
    inline T2 __highs2##NAME##2(T2 a, T2 b) { return T2(a.y, b.y); }                                    \
    inline T2 __lowhigh2highlow(T2 h) { return T2(h.y, h.x); }                                          \
    inline float __low2float(T2 h) { return ::emu_math::to_float(h.x); }                                \
    inline float __high2float(T2 h) { return ::emu_math::to_float(h.y); }                               \
    /* classification */                                                                                \
    inline bool __hisnan(T a) { const float x = ::emu_math::to_float(a); return x != x; }               \
    inline int __hisinf(T a) {                                                                          \
        const float x = ::emu_math::to_float(a);                                                        \
        return x == INFINITY ? 1 : (x == -INFINITY ? -1 : 0);                                           \
    }                                                                                                   \
    inline T2 __hisnan2(T2 a) {                                                                         \
        return T2(EMU_F16_ROUND(T, __hisnan(a.x) ? 1.0 : 0.0), EMU_F16_ROUND(T, __hisnan(a.y) ? 1.0 : 0.0)); \
    }                                                                                                   \
    /* arithmetic: every result is rounded once, to nearest even */                                     \
    EMU_F16_BINARY(T, T2, __hadd, __hadd2, x + y)                                                       \
    EMU_F16_BINARY(T, T2, __hsub, __hsub2, x - y)                                                       \
    EMU_F16_BINARY(T, T2, __hmul, __hmul2, x * y)                                                       \
    EMU_F16_BINARY(T, T2, __hdiv, __h2div, x / y)                                                       \
    EMU_F16_BINARY(T, T2, __hadd_rn, __hadd2_rn, x + y)                                                 \
    EMU_F16_BINARY(T, T2, __hsub_rn, __hsub2_rn, x - y)                                                 \
    EMU_F16_BINARY(T, T2, __hmul_rn, __hmul2_rn, x * y)                                                 \
    EMU_F16_BINARY(T, T2, __hadd_sat, __hadd2_sat, ::emu_math::sat01(x + y))                            \
    EMU_F16_BINARY(T, T2, __hsub_sat, __hsub2_sat, ::emu_math::sat01(x - y))                            \
    EMU_F16_BINARY(T, T2, __hmul_sat, __hmul2_sat, ::emu_math::sat01(x * y))                            \
    EMU_F16_FMA(T, T2, __hfma, __hfma2, r)                                                              \
    EMU_F16_FMA(T, T2, __hfma_sat, __hfma2_sat, ::emu_math::sat01(r))                                   \
    EMU_F16_FMA(T, T2, __hfma_relu, __hfma2_relu, ::emu_math::relu(r))                                  \
    /* sign-bit operations; a NaN comes out as the canonical 0x7FFF, as on an H100 */                   \
    inline T __hneg(T a) { return ::emu_math::from_bits<T>(__hisnan(a) ? 0x7FFFu : ::emu_math::to_bits(a) ^ 0x8000u); } \
    inline T __habs(T a) { return ::emu_math::from_bits<T>(__hisnan(a) ? 0x7FFFu : ::emu_math::to_bits(a) & 0x7FFFu); } \
    inline T2 __hneg2(T2 a) { return T2(__hneg(a.x), __hneg(a.y)); }                                    \
    inline T2 __habs2(T2 a) { return T2(__habs(a.x), __habs(a.y)); }                                    \
    /* a*b + c on complex numbers (x: real, y: imaginary), in CUDA's order of fmas */                   \
    inline T2 __hcmadd(T2 a, T2 b, T2 c) {                                                              \
        return T2(__hfma(__hneg(a.y), b.y, __hfma(a.x, b.x, c.x)), __hfma(a.y, b.x, __hfma(a.x, b.y, c.y))); \
    }                                                                                                   \
    /* max/min: a NaN operand yields the other one (both NaN: canonical NaN), +0 > -0; the     */    \
    /* _nan forms return canonical NaN if either operand is NaN                                  */    \
    inline T __hmax(T a, T b) {                                                                         \
        const float x = ::emu_math::to_float(a), y = ::emu_math::to_float(b);                           \
        if (x != x || y != y) return x != x && y != y ? ::emu_math::from_bits<T>(0x7FFF) : (x != x ? b : a); \
        if (x == y) return std::signbit(x) ? b : a;                                                     \
        return x > y ? a : b;                                                                           \
    }                                                                                                   \
    inline T __hmin(T a, T b) {                                                                         \
        const float x = ::emu_math::to_float(a), y = ::emu_math::to_float(b);                           \
        if (x != x || y != y) return x != x && y != y ? ::emu_math::from_bits<T>(0x7FFF) : (x != x ? b : a); \
        if (x == y) return std::signbit(x) ? a : b;                                                     \
        return x < y ? a : b;                                                                           \
    }                                                                                                   \
    inline T __hmax_nan(T a, T b) { return __hisnan(a) || __hisnan(b) ? ::emu_math::from_bits<T>(0x7FFF) : __hmax(a, b); } \
    inline T __hmin_nan(T a, T b) { return __hisnan(a) || __hisnan(b) ? ::emu_math::from_bits<T>(0x7FFF) : __hmin(a, b); } \
    inline T2 __hmax2(T2 a, T2 b) { return T2(__hmax(a.x, b.x), __hmax(a.y, b.y)); }                    \
    inline T2 __hmin2(T2 a, T2 b) { return T2(__hmin(a.x, b.x), __hmin(a.y, b.y)); }                    \
    inline T2 __hmax2_nan(T2 a, T2 b) { return T2(__hmax_nan(a.x, b.x), __hmax_nan(a.y, b.y)); }        \
    inline T2 __hmin2_nan(T2 a, T2 b) { return T2(__hmin_nan(a.x, b.x), __hmin_nan(a.y, b.y)); }        \
    /* comparisons: ordered ones are false on NaN, the u (unordered) ones true */                       \
    EMU_F16_CMP(T, T2, eq, x == y)                                                                      \
    EMU_F16_CMP(T, T2, ne, x < y || x > y)                                                              \
    EMU_F16_CMP(T, T2, lt, x < y)                                                                       \
    EMU_F16_CMP(T, T2, le, x <= y)                                                                      \
    EMU_F16_CMP(T, T2, gt, x > y)                                                                       \
    EMU_F16_CMP(T, T2, ge, x >= y)                                                                      \
    EMU_F16_CMP(T, T2, equ, !(x < y || x > y))                                                          \
    EMU_F16_CMP(T, T2, neu, !(x == y))                                                                  \
    EMU_F16_CMP(T, T2, ltu, !(x >= y))                                                                  \
    EMU_F16_CMP(T, T2, leu, !(x > y))                                                                   \
    EMU_F16_CMP(T, T2, gtu, !(x <= y))                                                                  \
    EMU_F16_CMP(T, T2, geu, !(x < y))                                                                   \
    /* math functions */                                                                                \
    EMU_F16_UNARY(T, T2, exp, std::exp(x))                                                              \
    EMU_F16_UNARY(T, T2, exp2, std::exp2(x))                                                            \
    EMU_F16_UNARY(T, T2, exp10, std::pow(10.0, x))                                                      \
    EMU_F16_UNARY(T, T2, log, std::log(x))                                                              \
    EMU_F16_UNARY(T, T2, log2, std::log2(x))                                                            \
    EMU_F16_UNARY(T, T2, log10, std::log10(x))                                                          \
    EMU_F16_UNARY(T, T2, sqrt, std::sqrt(x))                                                            \
    EMU_F16_UNARY(T, T2, rsqrt, 1.0 / std::sqrt(x))                                                     \
    EMU_F16_UNARY(T, T2, rcp, 1.0 / x)                                                                  \
    EMU_F16_UNARY(T, T2, sin, std::sin(x))                                                              \
    EMU_F16_UNARY(T, T2, cos, std::cos(x))                                                              \
    EMU_F16_UNARY(T, T2, tanh, std::tanh(x))                                                            \
    EMU_F16_UNARY(T, T2, tanh_approx, std::tanh(x))                                                     \
    EMU_F16_UNARY(T, T2, ceil, std::ceil(x))                                                            \
    EMU_F16_UNARY(T, T2, floor, std::floor(x))                                                          \
    EMU_F16_UNARY(T, T2, trunc, std::trunc(x))                                                          \
    EMU_F16_UNARY(T, T2, rint, std::nearbyint(x))

// Operators of the scalar type (CUDA's: arithmetic through the intrinsics above; == is ordered,
// != unordered, like float).
#define EMU_F16_OPERATORS(T)                                                                   \
    inline T operator+(const T& a, const T& b) { return __hadd(a, b); }                        \
    inline T operator-(const T& a, const T& b) { return __hsub(a, b); }                        \
    inline T operator*(const T& a, const T& b) { return __hmul(a, b); }                        \
    inline T operator/(const T& a, const T& b) { return __hdiv(a, b); }                        \
    inline T& operator+=(T& a, const T& b) { return a = __hadd(a, b); }                        \
    inline T& operator-=(T& a, const T& b) { return a = __hsub(a, b); }                        \
    inline T& operator*=(T& a, const T& b) { return a = __hmul(a, b); }                        \
    inline T& operator/=(T& a, const T& b) { return a = __hdiv(a, b); }                        \
    inline T& operator++(T& a) { return a = __hadd(a, EMU_F16_ROUND(T, 1.0)); }                \
    inline T& operator--(T& a) { return a = __hsub(a, EMU_F16_ROUND(T, 1.0)); }                \
    inline T operator++(T& a, int) { const T old = a; ++a; return old; }                       \
    inline T operator--(T& a, int) { const T old = a; --a; return old; }                       \
    inline T operator+(const T& a) { return a; }                                               \
    inline T operator-(const T& a) { return __hneg(a); }                                       \
    inline bool operator==(const T& a, const T& b) { return __heq(a, b); }                     \
    inline bool operator!=(const T& a, const T& b) { return __hneu(a, b); }                    \
    inline bool operator<(const T& a, const T& b) { return __hlt(a, b); }                      \
    inline bool operator<=(const T& a, const T& b) { return __hle(a, b); }                     \
    inline bool operator>(const T& a, const T& b) { return __hgt(a, b); }                      \
    inline bool operator>=(const T& a, const T& b) { return __hge(a, b); }

// Operators of the pair type: lane-wise arithmetic; comparisons true when both lanes are.
#define EMU_F16_OPERATORS2(T, T2)                                                              \
    inline T2 operator+(const T2& a, const T2& b) { return __hadd2(a, b); }                    \
    inline T2 operator-(const T2& a, const T2& b) { return __hsub2(a, b); }                    \
    inline T2 operator*(const T2& a, const T2& b) { return __hmul2(a, b); }                    \
    inline T2 operator/(const T2& a, const T2& b) { return __h2div(a, b); }                    \
    inline T2& operator+=(T2& a, const T2& b) { return a = __hadd2(a, b); }                    \
    inline T2& operator-=(T2& a, const T2& b) { return a = __hsub2(a, b); }                    \
    inline T2& operator*=(T2& a, const T2& b) { return a = __hmul2(a, b); }                    \
    inline T2& operator/=(T2& a, const T2& b) { return a = __h2div(a, b); }                    \
    inline T2& operator++(T2& a) { const T one = EMU_F16_ROUND(T, 1.0); return a = __hadd2(a, T2(one, one)); } \
    inline T2& operator--(T2& a) { const T one = EMU_F16_ROUND(T, 1.0); return a = __hsub2(a, T2(one, one)); } \
    inline T2 operator++(T2& a, int) { const T2 old = a; ++a; return old; }                    \
    inline T2 operator--(T2& a, int) { const T2 old = a; --a; return old; }                    \
    inline T2 operator+(const T2& a) { return a; }                                             \
    inline T2 operator-(const T2& a) { return __hneg2(a); }                                    \
    inline bool operator==(const T2& a, const T2& b) { return __hbeq2(a, b); }                 \
    inline bool operator!=(const T2& a, const T2& b) { return __hbneu2(a, b); }                \
    inline bool operator<(const T2& a, const T2& b) { return __hblt2(a, b); }                  \
    inline bool operator<=(const T2& a, const T2& b) { return __hble2(a, b); }                 \
    inline bool operator>(const T2& a, const T2& b) { return __hbgt2(a, b); }                  \
    inline bool operator>=(const T2& a, const T2& b) { return __hbge2(a, b); }

EMU_F16_API(__half, __half2, half)
#ifndef __CUDA_NO_HALF_OPERATORS__
EMU_F16_OPERATORS(__half)
#endif
#ifndef __CUDA_NO_HALF2_OPERATORS__
EMU_F16_OPERATORS2(__half, __half2)
#endif

// Named values (CUDA defines them in cuda_fp16.hpp).
#define CUDART_INF_FP16 __ushort_as_half((unsigned short)0x7C00U)
#define CUDART_NAN_FP16 __ushort_as_half((unsigned short)0x7FFFU)
#define CUDART_MIN_DENORM_FP16 __ushort_as_half((unsigned short)0x0001U)
#define CUDART_MAX_NORMAL_FP16 __ushort_as_half((unsigned short)0x7BFFU)
#define CUDART_NEG_ZERO_FP16 __ushort_as_half((unsigned short)0x8000U)
#define CUDART_ZERO_FP16 __ushort_as_half((unsigned short)0x0000U)
#define CUDART_ONE_FP16 __ushort_as_half((unsigned short)0x3C00U)

typedef __half half;
typedef __half2 half2;
typedef __half __nv_half;
typedef __half2 __nv_half2;
typedef __half_raw __nv_half_raw;
typedef __half2_raw __nv_half2_raw;
typedef __half nv_half;
typedef __half2 nv_half2;

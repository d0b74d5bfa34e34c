// emu_math.hpp: CUDA's device math library on the host, for the CPU emulator.
//
// Student kernels are plain CUDA C that NVRTC compiles for the GPU; on the CPU the same source
// goes through g++. This header supplies the CUDA math names g++ and glibc lack (rsqrtf,
// __popc, min(int, int), float4, ...) with CUDA's semantics. Where CUDA's fast intrinsic is an
// approximation (__expf, __fdividef, rsqrtf, ...), the emulator returns the accurate value: a
// kernel must not depend on the error of an approximation, and NumPy references are accurate.
//
// Everything is header-only and inline; helpers live in namespace emu_math. Self-contained:
// it also compiles standalone (without the emulator runtime header).
#pragma once

// Included first, on purpose: glibc's <math.h> declares internal functions named like CUDA's
// intrinsics (__expf, __sinf, exp10f, sincosf, ...; C23 glibc also rsqrtf, sinpif). We implement
// those in namespace emu_math and map the CUDA name to ours with a macro (see EMU_MATH_ALIAS).
// Such a macro would break glibc's declarations if <math.h> were parsed after it; including it
// here, before any macro, makes every later #include <cmath>/<math.h> a no-op (include guards).
#include <cmath>
#include <math.h>    // the global names kernels use unqualified: fminf, expf, isnan, signbit, ...
#include <cstdlib>   // abs(int), llabs
#include <cstdint>
#include <cstring>
#include <climits>
#include <cfloat>
#include <bit>
#include <limits>
#include <type_traits>

// Execution-space keywords, only when the emulator runtime did not define them. __device__ is
// empty (not `inline`): CUDA code writes `__device__ __forceinline__`, and `inline inline` is an
// error in C++.
#ifndef __host__
#define __host__
#endif
#ifndef __device__
#define __device__
#endif
#ifndef __forceinline__
#define __forceinline__ inline
#endif

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------
namespace emu_math {

__extension__ typedef __int128 int128;  // __extension__: no -pedantic warning
__extension__ typedef unsigned __int128 uint128;

// IEEE rounding directions of CUDA's _rn/_rz/_ru/_rd intrinsics.
enum class rnd { rn, rz, ru, rd };

// Round the exact value hi + lo to Out (float or double) in a directed mode (rz/ru/rd).
// hi is the value rounded to nearest in double; lo the (exact or sign-exact) remainder.
// First round to nearest, then step one ulp when the remainder says we crossed the target.
// A NaN remainder (infinite or NaN operands) means "exact": no step.
template <class Out, rnd M>
inline Out round_directed(double hi, double lo) {
    static_assert(M != rnd::rn, "round-to-nearest needs no remainder");
    const Out f = static_cast<Out>(hi);
    // Sign of (exact - f); hi - f is exact (and skipped when equal, so an infinite hi works).
    const double r = (static_cast<double>(f) == hi ? 0.0 : hi - static_cast<double>(f)) + lo;
    constexpr Out inf = std::numeric_limits<Out>::infinity();
    if (M == rnd::ru && r > 0) return std::nextafter(f, inf);
    if (M == rnd::rd && r < 0) return std::nextafter(f, -inf);
    if (M == rnd::rz && ((r < 0 && f > 0) || (r > 0 && f < 0))) return std::nextafter(f, Out(0));
    return f;
}

// Error-free sum: a + b == s + e exactly (Knuth's TwoSum).
inline void two_sum(double a, double b, double& s, double& e) {
    s = a + b;
    const double bb = s - a;
    e = (a - (s - bb)) + (b - bb);
}

// An exact zero sum x + y is +0 in every mode but rd, where it is -0 unless both are +0 (IEEE).
template <class F, rnd M> inline F zero_sum(double x, double y) {
    return M == rnd::rd && (std::signbit(x) || std::signbit(y) || x != 0) ? F(-0.0) : F(x + y);
}

// The exact result of a float operation as hi + lo in double, then rounded in mode M. rn uses
// the native float operation (one rounding); the directed modes use round_directed.
template <rnd M> inline float fadd(float a, float b) {
    if constexpr (M == rnd::rn) { return a + b; }
    else {
        double s, e;
        two_sum(a, b, s, e);
        return s == 0 ? zero_sum<float, M>(a, b) : round_directed<float, M>(s, e);
    }
}
template <rnd M> inline float fmul(float a, float b) {
    if constexpr (M == rnd::rn) return a * b;
    else return round_directed<float, M>(double(a) * double(b), 0.0);  // 48-bit product: exact
}
template <rnd M> inline float ffma(float a, float b, float c) {
    if constexpr (M == rnd::rn) { return std::fma(a, b, c); }
    else {
        const double p = double(a) * double(b);  // exact
        double s, e;
        two_sum(p, c, s, e);
        return s == 0 ? zero_sum<float, M>(p, c) : round_directed<float, M>(s, e);
    }
}
template <rnd M> inline float fdiv(float a, float b) {
    if constexpr (M == rnd::rn) { return a / b; }
    else {
        const double q = double(a) / double(b);
        const double r = std::fma(-q, double(b), double(a));  // exact remainder a - q*b
        return round_directed<float, M>(q, r / double(b));
    }
}
template <rnd M> inline float fsqrt(float a) {
    if constexpr (M == rnd::rn) { return std::sqrt(a); }
    else {
        const double s = std::sqrt(double(a));
        const double r = std::fma(-s, s, double(a));  // exact remainder a - s*s
        return round_directed<float, M>(s, r == 0 ? 0.0 : r / (2 * s));
    }
}
// Double precision: the same, with the error of the double operation as remainder. Only its
// sign matters (round_directed<double> steps by it), but the fma computing it could underflow
// to zero near the subnormal range; there the operands are scaled by 2^600 first (exactly).
inline double sign_of(double r) { return r == 0 || r != r ? r : (r > 0 ? 1.0 : -1.0); }
// An infinite result of finite operands overflowed: the exact value lies on the finite side.
inline bool overflowed(double r, double a, double b) { return std::isinf(r) && std::isfinite(a) && std::isfinite(b); }
template <rnd M> inline double dadd(double a, double b) {
    if constexpr (M == rnd::rn) { return a + b; }
    else {
        double s, e;
        two_sum(a, b, s, e);  // exact even for subnormal results
        if (overflowed(s, a, b)) e = -s;
        return s == 0 ? zero_sum<double, M>(a, b) : round_directed<double, M>(s, e);
    }
}
template <rnd M> inline double dmul(double a, double b) {
    if constexpr (M == rnd::rn) { return a * b; }
    else {
        double p = a * b;
        const double hi = p;
        if (p == 0) return round_directed<double, M>(p, a == 0 || b == 0 ? 0.0 : (std::signbit(a) != std::signbit(b) ? -1.0 : 1.0));
        if (overflowed(p, a, b)) return round_directed<double, M>(p, -p);
        if (std::fabs(p) < 0x1p-900) {  // then min(|a|, |b|) < 2^-450: scaling it cannot overflow
            (std::fabs(a) < std::fabs(b) ? a : b) *= 0x1p600;
            p *= 0x1p600;
        }
        return round_directed<double, M>(hi, sign_of(std::fma(a, b, -p)));
    }
}
template <rnd M> inline double ddiv(double a, double b) {
    if constexpr (M == rnd::rn) { return a / b; }
    else {
        const double q = a / b;
        if (overflowed(q, a, b) && b != 0) return round_directed<double, M>(q, -q);
        const double k = std::fabs(a) < 0x1p400 && std::fabs(b) < 0x1p400 ? 0x1p600 : 1.0;  // q is unchanged
        return round_directed<double, M>(q, sign_of(std::fma(-q, b * k, a * k)) * (b < 0 ? -1.0 : 1.0));
    }
}
template <rnd M> inline double dsqrt(double a) {
    if constexpr (M == rnd::rn) { return std::sqrt(a); }
    else {
        const double s = std::sqrt(a);
        const double r = a > 0 && a < 0x1p-900 ? std::fma(-s * 0x1p500, s * 0x1p500, a * 0x1p1000)  // s*2^500 = sqrt(a*2^1000)
                                               : std::fma(-s, s, a);
        return round_directed<double, M>(s, sign_of(r));
    }
}

// Integer -> floating point in mode M. 64-bit integers are not exact in double: the remainder
// is computed in 128-bit arithmetic.
template <class Out, rnd M, class I>
inline Out int_to(I x) {
    if constexpr (M == rnd::rn) return static_cast<Out>(x);  // one correctly rounded conversion
    else if constexpr (sizeof(I) <= 4) return round_directed<Out, M>(double(x), 0.0);
    else {
        const double hi = double(x);
        // hi may be 2^64 (ull) or 2^63 (ll): out of I's range but exact in __int128.
        const int128 diff = static_cast<int128>(x) - static_cast<int128>(hi);
        return round_directed<Out, M>(hi, double(diff));
    }
}

// Floating point -> integer as the GPU's cvt does it: round in mode M, then saturate to the
// integer's range (C++ leaves out-of-range conversions undefined). NaN gives what an H100 gives:
// 0 from float to 32-bit (and narrower) integers, the sign-bit pattern 0x80000000 or
// 0x8000000000000000 from double, and to 64-bit integers.
template <class I, rnd M, class F>
inline I to_int(F x) {
    const F r = M == rnd::rn ? std::nearbyint(x) : M == rnd::rz ? std::trunc(x)
              : M == rnd::ru ? std::ceil(x) : std::floor(x);
    if (r != r) {
        if (sizeof(I) == 8) return static_cast<I>(1ull << 63);
        return sizeof(F) == 8 && sizeof(I) == 4 ? static_cast<I>(1u << 31) : I(0);
    }
    const F top = std::ldexp(F(1), std::numeric_limits<I>::digits);  // 2^31, 2^32, 2^63, 2^64
    if (r >= top) return std::numeric_limits<I>::max();
    if (r <= F(std::numeric_limits<I>::min())) return std::numeric_limits<I>::min();
    return static_cast<I>(r);
}

}  // namespace emu_math

// ---------------------------------------------------------------------------------------------
// Reinterpretation (bit casts). constexpr, so CUDART_INF_F and friends are constant expressions.
// ---------------------------------------------------------------------------------------------
inline constexpr float __int_as_float(int x) { return std::bit_cast<float>(x); }
inline constexpr int __float_as_int(float x) { return std::bit_cast<int>(x); }
inline constexpr float __uint_as_float(unsigned int x) { return std::bit_cast<float>(x); }
inline constexpr unsigned int __float_as_uint(float x) { return std::bit_cast<unsigned int>(x); }
inline constexpr double __longlong_as_double(long long x) { return std::bit_cast<double>(x); }
inline constexpr long long __double_as_longlong(double x) { return std::bit_cast<long long>(x); }
inline constexpr int __double2hiint(double x) { return int(std::bit_cast<unsigned long long>(x) >> 32); }
inline constexpr int __double2loint(double x) { return int(std::bit_cast<unsigned long long>(x)); }
inline constexpr double __hiloint2double(int hi, int lo) {
    return std::bit_cast<double>((static_cast<unsigned long long>(static_cast<unsigned>(hi)) << 32) |
                                 static_cast<unsigned>(lo));
}

// ---------------------------------------------------------------------------------------------
// Vector types (vector_types.h): plain aggregates with CUDA's alignment, so `float4 v = {..}`,
// reinterpret_cast<float4*>(p) and sizeof/alignof match the GPU. Two-element vectors are aligned
// to their size, four-element ones to min(size, 16); 1- and 3-element ones to their scalar.
// uint3 and dim3 are left to the emulator runtime, which builds threadIdx/blockDim on them.
// ---------------------------------------------------------------------------------------------
#ifdef EMU_COUNT_IO
// The traced build: clang copies a 16-byte struct with a memcpy that its load/store tracing does
// not see, so the IO counts, the race detector and the profiler would miss a float4 or int4 copy.
// Copying through one 16-byte vector access instead is what the GPU does (ld.v4 / st.v4).
// The same holds for the 8-byte ones (int2, uint2, float2, short4, ushort4): a copy of one from a
// local whose pieces clang keeps apart (a struct of two __half2 read as a uint2) would otherwise be
// traced as two 4-byte accesses, where the GPU does one ld.v2 / st.v2.
namespace emu_math {
typedef int whole16 __attribute__((vector_size(16)));
typedef int whole8 __attribute__((vector_size(8)));
inline void copy16(void* d, const void* s) { *static_cast<whole16*>(d) = *static_cast<const whole16*>(s); }
inline void copy8(void* d, const void* s) { *static_cast<whole8*>(d) = *static_cast<const whole8*>(s); }
}  // namespace emu_math
#define EMU_COPY(S, BYTES)                                                         \
    S() = default;                                                                 \
    S(const S& o) { ::emu_math::copy##BYTES(this, &o); }                           \
    S& operator=(const S& o) { ::emu_math::copy##BYTES(this, &o); return *this; }
#define EMU_COPY16(S) EMU_COPY(S, 16)
#define EMU_VEC2_16(N, T) struct alignas(16) N##2 { T x, y; EMU_COPY16(N##2) \
    constexpr N##2(T a, T b = 0) : x(a), y(b) {} };
#define EMU_VEC4_16(N, T) struct alignas(16) N##4 { T x, y, z, w; EMU_COPY16(N##4) \
    constexpr N##4(T a, T b = 0, T c = 0, T d = 0) : x(a), y(b), z(c), w(d) {} };
#define EMU_VEC2_8(N, T) struct alignas(8) N##2 { T x, y; EMU_COPY(N##2, 8) \
    constexpr N##2(T a, T b = 0) : x(a), y(b) {} };
#define EMU_VEC4_8(N, T) struct alignas(8) N##4 { T x, y, z, w; EMU_COPY(N##4, 8) \
    constexpr N##4(T a, T b = 0, T c = 0, T d = 0) : x(a), y(b), z(c), w(d) {} };
#else
#define EMU_VEC2_16(N, T) struct alignas(16) N##2 { T x, y; };
#define EMU_VEC4_16(N, T) struct alignas(16) N##4 { T x, y, z, w; };
#define EMU_VEC2_8(N, T) struct alignas(8) N##2 { T x, y; };
#define EMU_VEC4_8(N, T) struct alignas(8) N##4 { T x, y, z, w; };
#endif
#define EMU_VEC1(N, T) struct N##1 { T x; }; \
    inline constexpr N##1 make_##N##1(T x) { return {x}; }
#define EMU_VEC2(N, T) struct alignas(2 * sizeof(T)) N##2 { T x, y; }; \
    inline constexpr N##2 make_##N##2(T x, T y) { return {x, y}; }
#define EMU_VEC3(N, T) struct N##3 { T x, y, z; }; \
    inline constexpr N##3 make_##N##3(T x, T y, T z) { return {x, y, z}; }
#define EMU_VEC4(N, T) struct alignas(4 * sizeof(T) < 16 ? 4 * sizeof(T) : 16) N##4 { T x, y, z, w; }; \
    inline constexpr N##4 make_##N##4(T x, T y, T z, T w) { return {x, y, z, w}; }
#define EMU_VEC2W(N, T) EMU_VEC2_16(N, T) \
    inline constexpr N##2 make_##N##2(T x, T y) { return {x, y}; }
#define EMU_VEC4W(N, T) EMU_VEC4_16(N, T) \
    inline constexpr N##4 make_##N##4(T x, T y, T z, T w) { return {x, y, z, w}; }
#define EMU_VEC2E(N, T) EMU_VEC2_8(N, T) \
    inline constexpr N##2 make_##N##2(T x, T y) { return {x, y}; }
#define EMU_VEC4E(N, T) EMU_VEC4_8(N, T) \
    inline constexpr N##4 make_##N##4(T x, T y, T z, T w) { return {x, y, z, w}; }
#define EMU_VEC_ALL(N, T) EMU_VEC1(N, T) EMU_VEC2(N, T) EMU_VEC3(N, T) EMU_VEC4(N, T)

// The 16-byte ones (four 4-byte or two 8-byte members) are EMU_VEC*W, the 8-byte ones EMU_VEC*E:
// see EMU_COPY16.
EMU_VEC_ALL(char, signed char)
EMU_VEC_ALL(uchar, unsigned char)
EMU_VEC1(short, short) EMU_VEC2(short, short) EMU_VEC3(short, short) EMU_VEC4E(short, short)
EMU_VEC1(ushort, unsigned short) EMU_VEC2(ushort, unsigned short) EMU_VEC3(ushort, unsigned short)
EMU_VEC4E(ushort, unsigned short)
EMU_VEC1(int, int) EMU_VEC2E(int, int) EMU_VEC3(int, int) EMU_VEC4W(int, int)
EMU_VEC1(uint, unsigned int) EMU_VEC2E(uint, unsigned int) EMU_VEC4W(uint, unsigned int)
EMU_VEC1(long, long) EMU_VEC2W(long, long) EMU_VEC3(long, long) EMU_VEC4(long, long)
EMU_VEC1(ulong, unsigned long) EMU_VEC2W(ulong, unsigned long) EMU_VEC3(ulong, unsigned long) EMU_VEC4(ulong, unsigned long)
EMU_VEC1(longlong, long long) EMU_VEC2W(longlong, long long) EMU_VEC3(longlong, long long) EMU_VEC4(longlong, long long)
EMU_VEC1(ulonglong, unsigned long long) EMU_VEC2W(ulonglong, unsigned long long) EMU_VEC3(ulonglong, unsigned long long)
EMU_VEC4(ulonglong, unsigned long long)
EMU_VEC1(float, float) EMU_VEC2E(float, float) EMU_VEC3(float, float) EMU_VEC4W(float, float)
EMU_VEC1(double, double) EMU_VEC2W(double, double) EMU_VEC3(double, double) EMU_VEC4(double, double)
#undef EMU_VEC1
#undef EMU_VEC2
#undef EMU_VEC3
#undef EMU_VEC2E
#undef EMU_VEC4E
#undef EMU_VEC4
#undef EMU_VEC_ALL
#undef EMU_VEC2W
#undef EMU_VEC4W
#undef EMU_VEC2_16
#undef EMU_VEC4_16

// ---------------------------------------------------------------------------------------------
// Cached loads and stores: on the CPU every cache hint is a plain load or store.
// ---------------------------------------------------------------------------------------------
template <class T> inline T __ldg(const T* p) { return *p; }
template <class T> inline T __ldca(const T* p) { return *p; }
template <class T> inline T __ldcg(const T* p) { return *p; }
template <class T> inline T __ldcs(const T* p) { return *p; }
template <class T> inline T __ldlu(const T* p) { return *p; }
template <class T> inline T __ldcv(const T* p) { return *p; }
template <class T> inline void __stwb(T* p, T v) { *p = v; }
template <class T> inline void __stcg(T* p, T v) { *p = v; }
template <class T> inline void __stcs(T* p, T v) { *p = v; }
template <class T> inline void __stwt(T* p, T v) { *p = v; }

// ---------------------------------------------------------------------------------------------
// min / max: CUDA declares them as global overloads (g++ has only std::min/std::max). The set
// mirrors CUDA's: mixed signed/unsigned pairs compare as unsigned, float pairs use fminf/fmaxf
// (a NaN operand yields the other operand), float/double pairs widen to double. Calls CUDA
// rejects as ambiguous (min(int, float)) are ambiguous here too.
// ---------------------------------------------------------------------------------------------
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned int umin(unsigned int a, unsigned int b) { return a < b ? a : b; }
inline unsigned int umax(unsigned int a, unsigned int b) { return a > b ? a : b; }
inline long long llmin(long long a, long long b) { return a < b ? a : b; }
inline long long llmax(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long ullmin(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long ullmax(unsigned long long a, unsigned long long b) { return a > b ? a : b; }

#define EMU_MINMAX(R, A, B) \
    inline R min(A a, B b) { return static_cast<R>(a) < static_cast<R>(b) ? static_cast<R>(a) : static_cast<R>(b); } \
    inline R max(A a, B b) { return static_cast<R>(a) > static_cast<R>(b) ? static_cast<R>(a) : static_cast<R>(b); }
EMU_MINMAX(unsigned int, unsigned int, unsigned int)
EMU_MINMAX(unsigned int, int, unsigned int)
EMU_MINMAX(unsigned int, unsigned int, int)
EMU_MINMAX(long, long, long)
EMU_MINMAX(unsigned long, unsigned long, unsigned long)
EMU_MINMAX(unsigned long, long, unsigned long)
EMU_MINMAX(unsigned long, unsigned long, long)
EMU_MINMAX(long long, long long, long long)
EMU_MINMAX(unsigned long long, unsigned long long, unsigned long long)
EMU_MINMAX(unsigned long long, long long, unsigned long long)
EMU_MINMAX(unsigned long long, unsigned long long, long long)
#undef EMU_MINMAX
// NaN operands are tested first: glibc's fmin returns NaN for a signalling NaN, the GPU the other operand.
namespace emu_math {
template <class F> inline F fmin(F a, F b) { return a != a ? b : b != b ? a : std::fmin(a, b); }
template <class F> inline F fmax(F a, F b) { return a != a ? b : b != b ? a : std::fmax(a, b); }
}  // namespace emu_math
inline float min(float a, float b) { return emu_math::fmin(a, b); }
inline float max(float a, float b) { return emu_math::fmax(a, b); }
inline double min(double a, double b) { return emu_math::fmin(a, b); }
inline double max(double a, double b) { return emu_math::fmax(a, b); }
inline double min(float a, double b) { return emu_math::fmin<double>(a, b); }
inline double max(float a, double b) { return emu_math::fmax<double>(a, b); }
inline double min(double a, float b) { return emu_math::fmin<double>(a, b); }
inline double max(double a, float b) { return emu_math::fmax<double>(a, b); }

// ---------------------------------------------------------------------------------------------
// Single-precision functions CUDA has and glibc lacks, or declares itself (as internal or GNU
// names). The latter are defined in namespace emu_math and the CUDA name is made a macro for
// ours, so glibc's declaration (already parsed above) and ours never meet.
// ---------------------------------------------------------------------------------------------
namespace emu_math {
// Fast-math intrinsics: the accurate value (CUDA's are approximations with a few ulp error).
inline float __expf(float x) { return std::exp(x); }
inline float __exp10f(float x) { return static_cast<float>(std::pow(10.0, double(x))); }
inline float __logf(float x) { return std::log(x); }
inline float __log2f(float x) { return std::log2(x); }
inline float __log10f(float x) { return std::log10(x); }
inline float __powf(float x, float y) { return std::pow(x, y); }
inline float __sinf(float x) { return std::sin(x); }
inline float __cosf(float x) { return std::cos(x); }
inline float __tanf(float x) { return std::tan(x); }
inline void __sincosf(float x, float* s, float* c) { *s = std::sin(x); *c = std::cos(x); }
// GNU (exp10f, sincosf) and C23 (rsqrtf, sinpif, cospif) names.
inline float exp10f(float x) { return static_cast<float>(std::pow(10.0, double(x))); }
inline double exp10(double x) { return std::pow(10.0, x); }
inline void sincosf(float x, float* s, float* c) { *s = std::sin(x); *c = std::cos(x); }
inline void sincos(double x, double* s, double* c) { *s = std::sin(x); *c = std::cos(x); }
inline float rsqrtf(float x) { return static_cast<float>(1.0 / std::sqrt(double(x))); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
// sin(pi x), cos(pi x): x is reduced exactly to [-1, 1] first, so integers give exact zeros
// (sinpi(n) = +-0, cospi(n + 1/2) = +0) instead of sin(pi * n) ~ 1e-16.
inline double sinpi(double x) {
    if (std::isinf(x)) return std::nan("");
    const double r = std::remainder(x, 2.0);  // exact
    if (r == std::trunc(r)) return std::copysign(0.0, x);
    if (std::fabs(r) == 0.5) return std::copysign(1.0, r);
    return std::sin(3.141592653589793238 * r);
}
inline double cospi(double x) {
    if (std::isinf(x)) return std::nan("");
    const double r = std::fabs(std::remainder(x, 2.0));
    if (r == 0.5) return 0.0;
    if (r == 0.0) return 1.0;
    if (r == 1.0) return -1.0;
    return std::cos(3.141592653589793238 * r);
}
inline float sinpif(float x) { return static_cast<float>(sinpi(x)); }
inline float cospif(float x) { return static_cast<float>(cospi(x)); }
}  // namespace emu_math

#define __expf ::emu_math::__expf
#define __exp10f ::emu_math::__exp10f
#define __logf ::emu_math::__logf
#define __log2f ::emu_math::__log2f
#define __log10f ::emu_math::__log10f
#define __powf ::emu_math::__powf
#define __sinf ::emu_math::__sinf
#define __cosf ::emu_math::__cosf
#define __tanf ::emu_math::__tanf
#define __sincosf ::emu_math::__sincosf
#define exp10f ::emu_math::exp10f
#define exp10 ::emu_math::exp10
#define sincosf ::emu_math::sincosf
#define sincos ::emu_math::sincos
#define rsqrtf ::emu_math::rsqrtf
#define rsqrt ::emu_math::rsqrt
#define sinpif ::emu_math::sinpif
#define cospif ::emu_math::cospif
#define sinpi ::emu_math::sinpi
#define cospi ::emu_math::cospi

// Names no C library declares: plain global functions.
inline float __fdividef(float x, float y) { return x / y; }
inline float fdividef(float x, float y) { return x / y; }
inline float __saturatef(float x) { return x >= 1.0f ? 1.0f : (x > 0.0f ? x : 0.0f); }  // NaN -> +0
inline float __frsqrt_rn(float x) { return static_cast<float>(1.0 / std::sqrt(double(x))); }
inline float rcbrtf(float x) { return static_cast<float>(1.0 / std::cbrt(double(x))); }
inline double rcbrt(double x) { return 1.0 / std::cbrt(x); }
inline void sincospif(float x, float* s, float* c) { *s = sinpif(x); *c = cospif(x); }
inline void sincospi(double x, double* s, double* c) { *s = sinpi(x); *c = cospi(x); }
// Norms, computed in double so the squares neither overflow nor underflow; an infinite
// component gives +inf even next to a NaN (as hypot does).
inline float norm3df(float a, float b, float c) {
    if (std::isinf(a) || std::isinf(b) || std::isinf(c)) return INFINITY;
    return static_cast<float>(std::sqrt(double(a) * a + double(b) * b + double(c) * c));
}
inline float norm4df(float a, float b, float c, float d) {
    if (std::isinf(a) || std::isinf(b) || std::isinf(c) || std::isinf(d)) return INFINITY;
    return static_cast<float>(std::sqrt(double(a) * a + double(b) * b + double(c) * c + double(d) * d));
}
inline float normf(int n, const float* a) {
    double s = 0; bool inf = false;
    for (int i = 0; i < n; ++i) { inf |= std::isinf(a[i]); s += double(a[i]) * a[i]; }
    return inf ? INFINITY : static_cast<float>(std::sqrt(s));
}
inline float rhypotf(float a, float b) { return 1.0f / std::hypot(a, b); }
inline float rnorm3df(float a, float b, float c) { return 1.0f / norm3df(a, b, c); }
inline float rnorm4df(float a, float b, float c, float d) { return 1.0f / norm4df(a, b, c, d); }
inline float rnormf(int n, const float* a) { return 1.0f / normf(n, a); }
inline double norm3d(double a, double b, double c) { return std::hypot(a, b, c); }
inline double rnorm3d(double a, double b, double c) { return 1.0 / std::hypot(a, b, c); }
inline float normcdff(float x) { return static_cast<float>(0.5 * std::erfc(-double(x) * 0.70710678118654752440)); }
inline double normcdf(double x) { return 0.5 * std::erfc(-x * 0.70710678118654752440); }

// ---------------------------------------------------------------------------------------------
// Arithmetic with an explicit rounding mode (__fadd_rz, __fmaf_ru, __dmul_rd, ...). The _rn
// forms are the plain IEEE operation.
// ---------------------------------------------------------------------------------------------
#define EMU_ROUNDED(SUF, M) \
    inline float __fadd_##SUF(float a, float b) { return ::emu_math::fadd<M>(a, b); } \
    inline float __fsub_##SUF(float a, float b) { return ::emu_math::fadd<M>(a, -b); } \
    inline float __fmul_##SUF(float a, float b) { return ::emu_math::fmul<M>(a, b); } \
    inline float __fmaf_##SUF(float a, float b, float c) { return ::emu_math::ffma<M>(a, b, c); } \
    inline float __fdiv_##SUF(float a, float b) { return ::emu_math::fdiv<M>(a, b); } \
    inline float __frcp_##SUF(float a) { return ::emu_math::fdiv<M>(1.0f, a); } \
    inline float __fsqrt_##SUF(float a) { return ::emu_math::fsqrt<M>(a); } \
    inline double __dadd_##SUF(double a, double b) { return ::emu_math::dadd<M>(a, b); } \
    inline double __dsub_##SUF(double a, double b) { return ::emu_math::dadd<M>(a, -b); } \
    inline double __dmul_##SUF(double a, double b) { return ::emu_math::dmul<M>(a, b); } \
    inline double __ddiv_##SUF(double a, double b) { return ::emu_math::ddiv<M>(a, b); } \
    inline double __drcp_##SUF(double a) { return ::emu_math::ddiv<M>(1.0, a); } \
    inline double __dsqrt_##SUF(double a) { return ::emu_math::dsqrt<M>(a); }
EMU_ROUNDED(rn, ::emu_math::rnd::rn)
EMU_ROUNDED(rz, ::emu_math::rnd::rz)
EMU_ROUNDED(ru, ::emu_math::rnd::ru)
EMU_ROUNDED(rd, ::emu_math::rnd::rd)
#undef EMU_ROUNDED
inline double __fma_rn(double a, double b, double c) { return std::fma(a, b, c); }

// ---------------------------------------------------------------------------------------------
// Conversions with an explicit rounding mode (__float2int_rn, __int2float_rz, ...). Float to
// integer saturates and maps NaN to 0, as the GPU does.
// ---------------------------------------------------------------------------------------------
#define EMU_CONVERSIONS(SUF, M) \
    inline int __float2int_##SUF(float x) { return ::emu_math::to_int<int, M>(x); } \
    inline unsigned int __float2uint_##SUF(float x) { return ::emu_math::to_int<unsigned int, M>(x); } \
    inline long long __float2ll_##SUF(float x) { return ::emu_math::to_int<long long, M>(x); } \
    inline unsigned long long __float2ull_##SUF(float x) { return ::emu_math::to_int<unsigned long long, M>(x); } \
    inline int __double2int_##SUF(double x) { return ::emu_math::to_int<int, M>(x); } \
    inline unsigned int __double2uint_##SUF(double x) { return ::emu_math::to_int<unsigned int, M>(x); } \
    inline long long __double2ll_##SUF(double x) { return ::emu_math::to_int<long long, M>(x); } \
    inline unsigned long long __double2ull_##SUF(double x) { return ::emu_math::to_int<unsigned long long, M>(x); } \
    inline float __int2float_##SUF(int x) { return ::emu_math::int_to<float, M>(x); } \
    inline float __uint2float_##SUF(unsigned int x) { return ::emu_math::int_to<float, M>(x); } \
    inline float __ll2float_##SUF(long long x) { return ::emu_math::int_to<float, M>(x); } \
    inline float __ull2float_##SUF(unsigned long long x) { return ::emu_math::int_to<float, M>(x); } \
    inline double __ll2double_##SUF(long long x) { return ::emu_math::int_to<double, M>(x); } \
    inline double __ull2double_##SUF(unsigned long long x) { return ::emu_math::int_to<double, M>(x); }
EMU_CONVERSIONS(rn, ::emu_math::rnd::rn)
EMU_CONVERSIONS(rz, ::emu_math::rnd::rz)
EMU_CONVERSIONS(ru, ::emu_math::rnd::ru)
EMU_CONVERSIONS(rd, ::emu_math::rnd::rd)
#undef EMU_CONVERSIONS
inline double __int2double_rn(int x) { return x; }
inline double __uint2double_rn(unsigned int x) { return x; }
inline float __double2float_rn(double x) { return static_cast<float>(x); }
inline float __double2float_rz(double x) { return ::emu_math::round_directed<float, ::emu_math::rnd::rz>(x, 0.0); }
inline float __double2float_ru(double x) { return ::emu_math::round_directed<float, ::emu_math::rnd::ru>(x, 0.0); }
inline float __double2float_rd(double x) { return ::emu_math::round_directed<float, ::emu_math::rnd::rd>(x, 0.0); }

// ---------------------------------------------------------------------------------------------
// Integer intrinsics
// ---------------------------------------------------------------------------------------------
inline int __clz(int x) { return std::countl_zero(static_cast<unsigned int>(x)); }  // __clz(0) = 32
inline int __clzll(long long x) { return std::countl_zero(static_cast<unsigned long long>(x)); }
inline int __popc(unsigned int x) { return std::popcount(x); }
inline int __popcll(unsigned long long x) { return std::popcount(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }  // 1-based index of the lowest set bit, 0 for 0
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned int __brev(unsigned int x) {
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0F0F0F0Fu) | ((x & 0x0F0F0F0Fu) << 4);
    return __builtin_bswap32(x);
}
inline unsigned long long __brevll(unsigned long long x) {
    return (static_cast<unsigned long long>(__brev(static_cast<unsigned int>(x))) << 32) | __brev(static_cast<unsigned int>(x >> 32));
}
// Byte n of the result is byte (s >> 4n) & 7 of the 8-byte value y:x (x holds bytes 0-3).
inline unsigned int __byte_perm(unsigned int x, unsigned int y, unsigned int s) {
    const unsigned long long v = (static_cast<unsigned long long>(y) << 32) | x;
    unsigned int r = 0;
    for (int n = 0; n < 4; ++n) r |= static_cast<unsigned int>((v >> (8 * ((s >> (4 * n)) & 7u))) & 0xFFu) << (8 * n);
    return r;
}
// Funnel shifts of the 64-bit value hi:lo. The plain forms take the shift mod 32, _c clamps it to 32.
inline unsigned int __funnelshift_l(unsigned int lo, unsigned int hi, unsigned int s) {
    return static_cast<unsigned int>((((static_cast<unsigned long long>(hi) << 32) | lo) << (s & 31u)) >> 32);
}
inline unsigned int __funnelshift_lc(unsigned int lo, unsigned int hi, unsigned int s) {
    return static_cast<unsigned int>((((static_cast<unsigned long long>(hi) << 32) | lo) << (s < 32u ? s : 32u)) >> 32);
}
inline unsigned int __funnelshift_r(unsigned int lo, unsigned int hi, unsigned int s) {
    return static_cast<unsigned int>((((static_cast<unsigned long long>(hi) << 32) | lo) >> (s & 31u)));
}
inline unsigned int __funnelshift_rc(unsigned int lo, unsigned int hi, unsigned int s) {
    return static_cast<unsigned int>((((static_cast<unsigned long long>(hi) << 32) | lo) >> (s < 32u ? s : 32u)));
}
// 24-bit multiplies use the low 24 bits of each operand (sign-extended for __mul24).
inline int __mul24(int x, int y) {
    const long long a = static_cast<int>(static_cast<unsigned int>(x) << 8) >> 8;
    const long long b = static_cast<int>(static_cast<unsigned int>(y) << 8) >> 8;
    return static_cast<int>(static_cast<unsigned int>(a * b));
}
inline unsigned int __umul24(unsigned int x, unsigned int y) {
    return static_cast<unsigned int>(static_cast<unsigned long long>(x & 0xFFFFFFu) * (y & 0xFFFFFFu));
}
inline int __mulhi(int x, int y) { return static_cast<int>((static_cast<long long>(x) * y) >> 32); }
inline unsigned int __umulhi(unsigned int x, unsigned int y) {
    return static_cast<unsigned int>((static_cast<unsigned long long>(x) * y) >> 32);
}
inline long long __mul64hi(long long x, long long y) { return static_cast<long long>((static_cast<emu_math::int128>(x) * y) >> 64); }
inline unsigned long long __umul64hi(unsigned long long x, unsigned long long y) {
    return static_cast<unsigned long long>((static_cast<emu_math::uint128>(x) * y) >> 64);
}
// Averages without overflow: __hadd rounds down, __rhadd up.
inline int __hadd(int x, int y) { return static_cast<int>((static_cast<long long>(x) + y) >> 1); }
inline int __rhadd(int x, int y) { return static_cast<int>((static_cast<long long>(x) + y + 1) >> 1); }
inline unsigned int __uhadd(unsigned int x, unsigned int y) { return static_cast<unsigned int>((static_cast<unsigned long long>(x) + y) >> 1); }
inline unsigned int __urhadd(unsigned int x, unsigned int y) { return static_cast<unsigned int>((static_cast<unsigned long long>(x) + y + 1) >> 1); }
// |x - y| + z
inline unsigned int __sad(int x, int y, unsigned int z) {
    return (x > y ? static_cast<unsigned int>(x) - static_cast<unsigned int>(y) : static_cast<unsigned int>(y) - static_cast<unsigned int>(x)) + z;
}
inline unsigned int __usad(unsigned int x, unsigned int y, unsigned int z) { return (x > y ? x - y : y - x) + z; }
// Four-way byte dot product plus accumulator.
inline int __dp4a(int a, int b, int c) {
    unsigned int r = static_cast<unsigned int>(c);  // wraps like the GPU, no signed overflow
    for (int n = 0; n < 32; n += 8) r += static_cast<unsigned int>(static_cast<signed char>(a >> n) * static_cast<signed char>(b >> n));
    return static_cast<int>(r);
}
inline unsigned int __dp4a(unsigned int a, unsigned int b, unsigned int c) {
    for (int n = 0; n < 32; n += 8) c += ((a >> n) & 0xFFu) * ((b >> n) & 0xFFu);
    return c;
}

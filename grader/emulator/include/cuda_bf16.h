// cuda_bf16.h for the CPU emulator: __nv_bfloat16 / __nv_bfloat162 with the API of CUDA's header.
//
// A struct holding the bfloat16 bits (g++ 12's __bf16 has no arithmetic). Like CUDA's header it
// includes cuda_fp16.h and overloads the same intrinsics (__hadd, __hfma, hexp, __heq2, ...) for
// the bfloat16 types; the generic 16-bit helpers and EMU_F16_API there do the work, with 8
// exponent and 7 fraction bits. float -> bfloat16 rounds to nearest even (a NaN stays NaN: the
// canonical 0x7FFF, never an inf from the rounding carry); bfloat16 -> float is exact.
//
// Honoured like CUDA: __CUDA_NO_BFLOAT16_CONVERSIONS__, __CUDA_NO_BFLOAT16_OPERATORS__,
// __CUDA_NO_BFLOAT162_OPERATORS__.
#pragma once
#include "cuda_fp16.h"

struct alignas(2) __nv_bfloat16_raw { unsigned short x; };
struct alignas(4) __nv_bfloat162_raw { unsigned short x, y; };

struct alignas(2) __nv_bfloat16 {
protected:
    unsigned short __x;  // bfloat16 bits: the top half of a float

public:
    __nv_bfloat16() = default;
    constexpr __nv_bfloat16(const __nv_bfloat16_raw& r) : __x(r.x) {}
    constexpr __nv_bfloat16& operator=(const __nv_bfloat16_raw& r) { __x = r.x; return *this; }
    constexpr operator __nv_bfloat16_raw() const { return __nv_bfloat16_raw{__x}; }
#ifndef __CUDA_NO_BFLOAT16_CONVERSIONS__
    explicit __nv_bfloat16(__half h) : __x(::emu_math::round_to_bits<8, 7>(::emu_math::to_float(h))) {}
    EMU_F16_CONVERSION_MEMBERS(__nv_bfloat16, 8, 7)
#endif
};

struct alignas(4) __nv_bfloat162 {
    __nv_bfloat16 x, y;
    __nv_bfloat162() = default;
    constexpr __nv_bfloat162(const __nv_bfloat16& a, const __nv_bfloat16& b) : x(a), y(b) {}
    constexpr __nv_bfloat162(const __nv_bfloat162_raw& r) : x(__nv_bfloat16_raw{r.x}), y(__nv_bfloat16_raw{r.y}) {}
    constexpr __nv_bfloat162& operator=(const __nv_bfloat162_raw& r) { return *this = __nv_bfloat162(r); }
    constexpr operator __nv_bfloat162_raw() const {
        return __nv_bfloat162_raw{static_cast<__nv_bfloat16_raw>(x).x, static_cast<__nv_bfloat16_raw>(y).x};
    }
};

template <> struct emu_math::f16_traits<__nv_bfloat16> {
    static constexpr int EB = 8, MB = 7;
    using raw = __nv_bfloat16_raw;
};

// Declared in cuda_fp16.h: __half from bfloat16 (explicit), one rounding.
inline __half::__half(__nv_bfloat16 b) : __x(::emu_math::round_to_bits<5, 10>(::emu_math::to_float(b))) {}

EMU_F16_API(__nv_bfloat16, __nv_bfloat162, bfloat16)
#ifndef __CUDA_NO_BFLOAT16_OPERATORS__
EMU_F16_OPERATORS(__nv_bfloat16)
#endif
#ifndef __CUDA_NO_BFLOAT162_OPERATORS__
EMU_F16_OPERATORS2(__nv_bfloat16, __nv_bfloat162)
#endif

// Named values (CUDA defines them in cuda_bf16.hpp).
#define CUDART_INF_BF16 __ushort_as_bfloat16((unsigned short)0x7F80U)
#define CUDART_NAN_BF16 __ushort_as_bfloat16((unsigned short)0x7FFFU)
#define CUDART_MIN_DENORM_BF16 __ushort_as_bfloat16((unsigned short)0x0001U)
#define CUDART_MAX_NORMAL_BF16 __ushort_as_bfloat16((unsigned short)0x7F7FU)
#define CUDART_NEG_ZERO_BF16 __ushort_as_bfloat16((unsigned short)0x8000U)
#define CUDART_ZERO_BF16 __ushort_as_bfloat16((unsigned short)0x0000U)
#define CUDART_ONE_BF16 __ushort_as_bfloat16((unsigned short)0x3F80U)

typedef __nv_bfloat16 nv_bfloat16;
typedef __nv_bfloat162 nv_bfloat162;

// emu_runtime.hpp: CUDA's device-side vocabulary as plain C++, force-included before every
// kernel the emulator compiles. Each CUDA thread is a fiber of the launcher; the collective
// operations below call into the launcher, which switches fibers.
#pragma once
#include <atomic>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <type_traits>
#include <utility>

#include "emu_abi.hpp"

// ----------------------------------------------------------------------------- qualifiers
#define __global__
#define __device__
#define __host__
#define __constant__
#define __managed__
#define __grid_constant__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __inline__ inline
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
// All fibers of a block run on one OS thread, one block at a time, so thread-local storage
// is exactly per-block storage. The launcher poisons it before every block.
#define __shared__ static thread_local
#define __CUDACC__ 1
#define __CUDA_ARCH__ 900
#define __CUDACC_RTC__ 1
#define __CUDA_EMULATOR__ 1

inline uint3 make_uint3(unsigned int x, unsigned int y, unsigned int z) { return uint3{x, y, z}; }

// ----------------------------------------------------------------------------- built-ins
#define threadIdx (static_cast<const ::uint3&>(emu_ctx.cur->tid))
#define blockIdx (static_cast<const ::uint3&>(emu_ctx.block_idx))
#define blockDim (static_cast<const ::dim3&>(emu_ctx.block_dim))
#define gridDim (static_cast<const ::dim3&>(emu_ctx.grid_dim))
#define warpSize 32

#include "emu_math.hpp"

// ----------------------------------------------------------------------------- barriers
#define __syncthreads() emu_syncthreads(__LINE__)
#define __syncthreads_count(p) emu_syncthreads_reduce(__LINE__, ::emu::kBarCount, (p) ? 1 : 0)
#define __syncthreads_and(p) emu_syncthreads_reduce(__LINE__, ::emu::kBarAnd, (p) ? 1 : 0)
#define __syncthreads_or(p) emu_syncthreads_reduce(__LINE__, ::emu::kBarOr, (p) ? 1 : 0)
#define __syncwarp(...) ::emu::syncwarp(__LINE__ __VA_OPT__(, ) __VA_ARGS__)
#define __threadfence() __atomic_thread_fence(__ATOMIC_SEQ_CST)
#define __threadfence_block() __atomic_signal_fence(__ATOMIC_SEQ_CST)
#define __threadfence_system() __atomic_thread_fence(__ATOMIC_SEQ_CST)

// ----------------------------------------------------------------------------- warp collectives
namespace emu {

template <class T>
inline uint64_t to_bits(T v) {
    static_assert(sizeof(T) <= 8, "warp shuffles move at most 8 bytes; shuffle the members one by one");
    static_assert(std::is_trivially_copyable_v<T>, "warp shuffles need a plain value type");
    uint64_t b = 0;
    std::memcpy(&b, &v, sizeof(T));
    return b;
}

template <class T>
inline T from_bits(uint64_t b) {
    T v;
    std::memcpy(&v, &b, sizeof(T));
    return v;
}

template <class T>
inline T shfl_op(int op, int line, unsigned mask, T v, int arg, int width = 32) {
    return from_bits<T>(emu_warp(op, line, mask, to_bits(v), arg, width));
}

inline void syncwarp(int line, unsigned mask = 0xffffffffu) { emu_warp(kSyncWarp, line, mask, 0, 0, 32); }

template <class T>
inline T reduce(int op, int line, unsigned mask, T v) {
    static_assert(std::is_integral_v<T> && sizeof(T) == 4, "__reduce_*_sync takes int or unsigned");
    // The launcher reduces 64-bit patterns; sign-extend so min/max order signed values right.
    uint64_t bits = std::is_signed_v<T> ? (uint64_t)(int64_t)v : (uint64_t)(uint32_t)v;
    return (T)emu_warp(op | (std::is_signed_v<T> ? 0x100 : 0), line, mask, bits, 0, 32);
}

}  // namespace emu

#define __shfl_sync(...) ::emu::shfl_op(::emu::kShflIdx, __LINE__, __VA_ARGS__)
#define __shfl_up_sync(...) ::emu::shfl_op(::emu::kShflUp, __LINE__, __VA_ARGS__)
#define __shfl_down_sync(...) ::emu::shfl_op(::emu::kShflDown, __LINE__, __VA_ARGS__)
#define __shfl_xor_sync(...) ::emu::shfl_op(::emu::kShflXor, __LINE__, __VA_ARGS__)
#define __ballot_sync(mask, p) ((unsigned)emu_warp(::emu::kBallot, __LINE__, mask, (p) ? 1 : 0, 0, 32))
#define __any_sync(mask, p) ((int)emu_warp(::emu::kAny, __LINE__, mask, (p) ? 1 : 0, 0, 32))
#define __all_sync(mask, p) ((int)emu_warp(::emu::kAll, __LINE__, mask, (p) ? 1 : 0, 0, 32))
#define __match_any_sync(mask, v) ((unsigned)emu_warp(::emu::kMatchAny, __LINE__, mask, ::emu::to_bits(v), 0, 32))
#define __reduce_add_sync(mask, v) ::emu::reduce(::emu::kReduceAdd, __LINE__, mask, v)
#define __reduce_min_sync(mask, v) ::emu::reduce(::emu::kReduceMin, __LINE__, mask, v)
#define __reduce_max_sync(mask, v) ::emu::reduce(::emu::kReduceMax, __LINE__, mask, v)
#define __reduce_and_sync(mask, v) ::emu::reduce(::emu::kReduceAnd, __LINE__, mask, v)
#define __reduce_or_sync(mask, v) ::emu::reduce(::emu::kReduceOr, __LINE__, mask, v)
#define __reduce_xor_sync(mask, v) ::emu::reduce(::emu::kReduceXor, __LINE__, mask, v)
#define __activemask() emu_activemask()

inline unsigned __lanemask_lt() { return (1u << (emu_ctx.cur->linear % 32u)) - 1u; }

// ----------------------------------------------------------------------------- atomics
// Fibers of one block share an OS thread, but blocks run on several, so these are real atomics.
// Under EMU_COUNT_IO (the clang build that counts IO and checks races) each atomic reports itself
// once as a read-modify-write through emu_io_rmw, from the student's line: the wrappers are always
// inlined, and they make no traced plain load of their own.
#define EMU_ATOMIC_FN inline __attribute__((always_inline))
#ifdef EMU_COUNT_IO
#define EMU_IO_RMW(p) emu_io_rmw((const void*)(p), sizeof(*(p)))
#else
#define EMU_IO_RMW(p) ((void)0)
#endif

namespace emu {

template <class T>
EMU_ATOMIC_FN T atomic_rmw_cas(T* p, T (*f)(T, T), T v) {
    static_assert(sizeof(T) == 4 || sizeof(T) == 8, "atomics on 4- or 8-byte values only");
    using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
    Bits* bp = reinterpret_cast<Bits*>(p);
#ifdef EMU_COUNT_IO
    // No plain load here: it would be traced as a second read. The first compare-exchange
    // fetches the current value (unless the guess was right).
    Bits old_bits = 0;
#else
    Bits old_bits = __atomic_load_n(bp, __ATOMIC_RELAXED);
#endif
    for (;;) {
        T old_val, new_val;
        std::memcpy(&old_val, &old_bits, sizeof(T));
        new_val = f(old_val, v);
        Bits new_bits;
        std::memcpy(&new_bits, &new_val, sizeof(T));
        if (__atomic_compare_exchange_n(bp, &old_bits, new_bits, false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
            return old_val;
    }
}

template <class T> inline T op_add(T a, T b) { return a + b; }
template <class T> inline T op_min(T a, T b) { return b < a ? b : a; }
template <class T> inline T op_max(T a, T b) { return a < b ? b : a; }

}  // namespace emu

#define EMU_ATOMIC_INT(T)                                                                                   \
    EMU_ATOMIC_FN T atomicAdd(T* p, T v) { EMU_IO_RMW(p); return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }   \
    EMU_ATOMIC_FN T atomicSub(T* p, T v) { EMU_IO_RMW(p); return __atomic_fetch_sub(p, v, __ATOMIC_SEQ_CST); }   \
    EMU_ATOMIC_FN T atomicAnd(T* p, T v) { EMU_IO_RMW(p); return __atomic_fetch_and(p, v, __ATOMIC_SEQ_CST); }   \
    EMU_ATOMIC_FN T atomicOr(T* p, T v) { EMU_IO_RMW(p); return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST); }     \
    EMU_ATOMIC_FN T atomicXor(T* p, T v) { EMU_IO_RMW(p); return __atomic_fetch_xor(p, v, __ATOMIC_SEQ_CST); }   \
    EMU_ATOMIC_FN T atomicExch(T* p, T v) { EMU_IO_RMW(p); return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); } \
    EMU_ATOMIC_FN T atomicMin(T* p, T v) { EMU_IO_RMW(p); return ::emu::atomic_rmw_cas<T>(p, ::emu::op_min<T>, v); } \
    EMU_ATOMIC_FN T atomicMax(T* p, T v) { EMU_IO_RMW(p); return ::emu::atomic_rmw_cas<T>(p, ::emu::op_max<T>, v); } \
    EMU_ATOMIC_FN T atomicCAS(T* p, T cmp, T v) {                                                                  \
        EMU_IO_RMW(p);                                                                                      \
        T expected = cmp;                                                                                   \
        if (__atomic_compare_exchange_n(p, &expected, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))        \
            return cmp;                                                                                     \
        /* A failed CAS is often a spin lock held by a fiber of this block: let it run. */                  \
        emu_yield();                                                                                        \
        return expected;                                                                                    \
    }
EMU_ATOMIC_INT(int)
EMU_ATOMIC_INT(unsigned int)
EMU_ATOMIC_INT(unsigned long long)
EMU_ATOMIC_INT(long long)
#undef EMU_ATOMIC_INT

EMU_ATOMIC_FN float atomicAdd(float* p, float v) { EMU_IO_RMW(p); return emu::atomic_rmw_cas<float>(p, emu::op_add<float>, v); }
EMU_ATOMIC_FN double atomicAdd(double* p, double v) { EMU_IO_RMW(p); return emu::atomic_rmw_cas<double>(p, emu::op_add<double>, v); }
EMU_ATOMIC_FN float atomicExch(float* p, float v) {
    EMU_IO_RMW(p);
    uint32_t b;
    std::memcpy(&b, &v, 4);
    b = __atomic_exchange_n(reinterpret_cast<uint32_t*>(p), b, __ATOMIC_SEQ_CST);
    std::memcpy(&v, &b, 4);
    return v;
}
EMU_ATOMIC_FN unsigned int atomicInc(unsigned int* p, unsigned int limit) {
    EMU_IO_RMW(p);
    return emu::atomic_rmw_cas<unsigned int>(p, [](unsigned a, unsigned l) { return a >= l ? 0u : a + 1; }, limit);
}
EMU_ATOMIC_FN unsigned int atomicDec(unsigned int* p, unsigned int limit) {
    EMU_IO_RMW(p);
    return emu::atomic_rmw_cas<unsigned int>(p, [](unsigned a, unsigned l) { return (a == 0 || a > l) ? l : a - 1; }, limit);
}
#define atomicAdd_block atomicAdd
#define atomicMax_block atomicMax
#define atomicMin_block atomicMin
#define atomicCAS_block atomicCAS
#define atomicExch_block atomicExch

// ----------------------------------------------------------------------------- time, output, faults
inline long long clock64() { return (long long)__builtin_ia32_rdtsc(); }
#define clock() ((clock_t)__builtin_ia32_rdtsc())
#define __nanosleep(ns) emu_yield()

#undef printf
#define printf emu_printf
#include <assert.h>  // the emulator's, next to this header
#define __trap() emu_trap(__FILE__, __LINE__)
#define __brkpt() emu_trap(__FILE__, __LINE__)

namespace emu {
// Calls a kernel with arguments the launcher packed as an array of pointers to values.
template <class... P, std::size_t... I>
inline void invoke_impl(void (*f)(P...), void* const* a, std::index_sequence<I...>) {
    f(*static_cast<std::remove_cv_t<std::remove_reference_t<P>>*>(a[I])...);
}
template <class... P>
inline void invoke(void (*f)(P...), void* const* a) {
    invoke_impl(f, a, std::index_sequence_for<P...>{});
}
}  // namespace emu

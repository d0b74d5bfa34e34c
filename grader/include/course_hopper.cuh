// course_hopper.cuh: Hopper's own primitives (sm_90a): transaction barriers, the warpgroup MMA and
// the proxy fences around them. One spelling on the GPU (inline PTX) and on the emulator.
//
// mbarrier: a 64-bit __shared__ object (unsigned long long) that counts a phase's arrivals and its
// transaction bytes; a phase completes when `count` arrivals have been made and every announced
// byte has landed, then the next phase begins (phase k has parity k % 2).
//   mbarrier_init(bar, count)            mbarrier.init.shared::cta.b64: one thread, before any use;
//                                        then fence_mbarrier_init() and a __syncthreads().
//   mbarrier_arrive(bar)                 mbarrier.arrive.shared::cta.b64: one arrival; returns the
//                                        state token (the phase it counted in).
//   mbarrier_arrive_expect_tx(bar, n)    mbarrier.arrive.expect_tx.shared::cta.b64: announces n
//                                        bytes for this phase, then arrives (a TMA producer's call).
//   mbarrier_expect_tx(bar, n)           mbarrier.expect_tx.relaxed.cta.shared::cta.b64: announces
//                                        n bytes without arriving.
//   mbarrier_try_wait_parity(bar, p)     mbarrier.try_wait.parity.shared::cta.b64: true once the
//                                        phase of parity p has completed; it may return false after
//                                        a time limit, so wait with while (!mbarrier_try_wait_parity(bar, p)) {}
//   fence_mbarrier_init()                fence.mbarrier_init.release.cluster
//   fence_proxy_async()                  fence.proxy.async.shared::cta: this thread's ordinary
//                                        stores to shared memory become visible to the async proxy
//                                        (wgmma, TMA); needed before a barrier that hands a tile
//                                        written with ordinary stores to a wgmma.
//
// wgmma, the warpgroup MMA: D (64 x N, float) = A (64 x 16) * B (16 x N) + D, issued by all 128
// threads of a warpgroup (warps 4k..4k+3) together, running asynchronously:
//   wgmma_fence()                        wgmma.fence.sync.aligned: before the first wgmma, and
//                                        between touching accumulator or A registers and a wgmma.
//   wgmma_m64n{N}k16_{f16,bf16}_ss<TRANS_A, TRANS_B>(d, desc_a, desc_b, scale_d = 1)
//                                        wgmma.mma_async.sync.aligned.m64nNk16.f32.{f16,bf16}: A
//                                        and B in shared memory through matrix descriptors;
//                                        TRANS = 0: K-major, 1: M- (A) or N-major (B). N = 8..256
//                                        in steps of 8; d is float[N / 2]; scale_d = 0: D = A * B.
//   wgmma_m64n{N}k16_{f16,bf16}_rs<TRANS_B>(d, a, desc_b, scale_d = 1)
//                                        A from registers: unsigned a[4], the fragment below.
//   wgmma_commit_group()                 wgmma.commit_group.sync.aligned: closes a group of wgmmas.
//   wgmma_wait_group<N>()                wgmma.wait_group.sync.aligned N: until at most N groups
//                                        are pending. Accumulators belong to the tensor cores from
//                                        the wgmma to the wait that retires it: do not touch them.
//   make_smem_desc<SWIZZLE>(tile, leading_bytes, stride_bytes)
//                                        the 64-bit matrix descriptor: bits 0-13 the tile's
//                                        shared address >> 4, 16-29 leading byte offset >> 4, 32-45
//                                        stride byte offset >> 4, 49-51 base offset (0), 62-63 the
//                                        swizzle (SWIZZLE bytes: 0 none, 128 -> 1, 64 -> 2, 32 -> 3).
// TMA, the tensor memory accelerator: one thread copies a whole box of a tensor map (a
// grader.TensorMap argument, `const CUtensorMap*` in the kernel: coordinates innermost first).
//   tma_load_{1..5}d(dst, map, c0, ..., bar)
//                                        cp.async.bulk.tensor.Nd.shared::cluster.global.tile.
//                                        mbarrier::complete_tx::bytes: the box starting at (c0, ...)
//                                        into shared memory at dst (128-byte aligned), densely,
//                                        innermost first, swizzled as the map says; elements out of
//                                        bounds arrive as zeros; the box's bytes count down bar's
//                                        transaction count (announce them with expect_tx).
//   tma_store_{1..5}d(map, c0, ..., src) cp.async.bulk.tensor.Nd.global.shared::cta.tile.bulk_group:
//                                        the box from shared memory back; out-of-bounds elements are
//                                        not written.
//   cp_async_bulk_commit_group()         cp.async.bulk.commit_group: closes a group of stores.
//   cp_async_bulk_wait_group<N>()        cp.async.bulk.wait_group N: until at most N groups are
//                                        pending (their writes done).
//   cp_async_bulk_wait_group_read<N>()   cp.async.bulk.wait_group.read N: until their reads of
//                                        shared memory are done (the buffer may be rewritten).
//   fence_proxy_tensormap_acquire(map)   fence.proxy.tensormap::generic.acquire.gpu: the map's 128
//                                        bytes, written by a host copy, seen by the copy engine.
//
// Warp specialisation:
//   setmaxnreg_inc<N>(), setmaxnreg_dec<N>()
//                                        setmaxnreg.{inc,dec}.sync.aligned.u32 N: this warpgroup's
//                                        threads raise or lower their register count to N (24..256,
//                                        a multiple of 8), all 128 together with one N; takes effect
//                                        only in a kernel with a register cap (__launch_bounds__(T, 1)).
//   elect_one_sync()                     elect.sync with all 32 lanes: true in exactly one of them
//                                        (the lowest lane), the others false: "one thread issues".
//   stmatrix_x{1,2,4}(row, r), stmatrix_x{1,2,4}_trans(row, r)
//                                        stmatrix.sync.aligned.m8n8.x{1,2,4}{.trans}.shared.b16:
//                                        ldmatrix in reverse (course_tensor.cuh's layouts): lane
//                                        8m + j gives the address of row j of matrix m, and lane L's
//                                        r[m] holds row L / 4, columns 2 (L % 4) and the next one.
//
// Fragments (thread t of the warpgroup, w = t / 32, g = t % 32 / 4, q = t % 4):
//   d[i]: row 16w + g + 8 * (i / 2 % 2), column 8 * (i / 4) + 2q + i % 2.
//   a[r], two 16-bit values: row 16w + g + 8 * (r % 2), columns 2q + 8 * (r / 2) and the next one
//   (the lower 16 bits hold the lower column).
// Shared-memory layouts, in 16-byte units of 8 elements (PTX ISA "Shared Memory Matrix Layout"),
// for an operand of R rows along M or N: K-major, no swizzle: units of 8 rows x 16 bytes, 8 rows
// apart by the stride byte offset, the two 8-element halves of K apart by the leading byte offset;
// K-major, swizzle W (32, 64, 128): rows of W bytes (K contiguous), 8 rows apart by the stride byte
// offset; MN-major, no swizzle: 8 consecutive M/N elements per unit, the 8 k of a group 16 bytes
// apart, groups of 8 along M/N apart by the stride offset, groups of 8 k apart by the leading
// offset; MN-major, swizzle W: rows of W bytes along M/N, one per k, W / 16 units apart by the
// leading offset, groups of 8 k apart by the stride offset. The swizzle XORs the unit's index in its
// row (address bits 4..) with the row's index in its 8-row pattern (address bits 7..), on the
// shared address itself: a swizzled tile starts at a multiple of 8 * W bytes.
#pragma once

#include "course_wgmma_ptx.cuh"

// The driver's tensor map: 128 opaque bytes, 64-byte aligned (cuda.h's CUtensorMap, which NVRTC
// lacks). Kernels take it by pointer: `const CUtensorMap* map`.
#ifndef __cuda_cuda_h__
struct __align__(64) CUtensorMap {
    unsigned long long opaque[16];
};
#endif

#ifdef __CUDA_EMULATOR__
#include "emu_hopper.hpp"

#define EMU_HOPPER_FN inline __attribute__((always_inline))
EMU_HOPPER_FN void mbarrier_init(unsigned long long* bar, unsigned count, emu::hopper::Line line = {__builtin_LINE()}) {
    emu_mbarrier_init(bar, count, line.n);
}
EMU_HOPPER_FN unsigned long long mbarrier_arrive(unsigned long long* bar, emu::hopper::Line line = {__builtin_LINE()}) {
    return emu_mbarrier_arrive(bar, 0, 0, line.n);
}
EMU_HOPPER_FN unsigned long long mbarrier_arrive_expect_tx(unsigned long long* bar, unsigned bytes,
                                                           emu::hopper::Line line = {__builtin_LINE()}) {
    return emu_mbarrier_arrive(bar, bytes, 1, line.n);
}
EMU_HOPPER_FN void mbarrier_expect_tx(unsigned long long* bar, unsigned bytes, emu::hopper::Line line = {__builtin_LINE()}) {
    emu_mbarrier_arrive(bar, bytes, 2, line.n);
}
EMU_HOPPER_FN bool mbarrier_try_wait_parity(unsigned long long* bar, unsigned parity,
                                            emu::hopper::Line line = {__builtin_LINE()}) {
    return emu_mbarrier_try_wait_parity(bar, parity, line.n) != 0;
}
EMU_HOPPER_FN void fence_mbarrier_init(emu::hopper::Line line = {__builtin_LINE()}) { emu_fence_mbarrier_init(line.n); }
EMU_HOPPER_FN void fence_proxy_async(emu::hopper::Line line = {__builtin_LINE()}) { emu_fence_proxy_async(line.n); }
EMU_HOPPER_FN void wgmma_fence(emu::hopper::Line line = {__builtin_LINE()}) { emu_wgmma_fence(line.n); }
EMU_HOPPER_FN void wgmma_commit_group(emu::hopper::Line line = {__builtin_LINE()}) { emu_wgmma_commit(line.n); }
template <int N>
EMU_HOPPER_FN void wgmma_wait_group(emu::hopper::Line line = {__builtin_LINE()}) {
    static_assert(N >= 0 && N <= 7, "wgmma_wait_group<N>: N, the groups left pending, is 0..7");
    emu_wgmma_wait(N, line.n);
}

#define COURSE_WGMMA_FORMS(N, type, bf16)                                                                        \
    template <int TRANS_A = 0, int TRANS_B = 0>                                                                  \
    EMU_HOPPER_FN void wgmma_m64n##N##k16_##type##_ss(float (&d)[N / 2], unsigned long long desc_a,               \
                                                      unsigned long long desc_b, int scale_d = 1,                 \
                                                      emu::hopper::Line line = {__builtin_LINE()}) {              \
        emu::hopper::wgmma<N, bf16, TRANS_A, TRANS_B, false>("wgmma_m64n" #N "k16_" #type "_ss", d, nullptr,      \
                                                             desc_a, desc_b, scale_d, line.n);                    \
    }                                                                                                             \
    template <int TRANS_B = 0>                                                                                    \
    EMU_HOPPER_FN void wgmma_m64n##N##k16_##type##_rs(float (&d)[N / 2], const unsigned (&a)[4],                 \
                                                      unsigned long long desc_b, int scale_d = 1,                 \
                                                      emu::hopper::Line line = {__builtin_LINE()}) {              \
        emu::hopper::wgmma<N, bf16, 0, TRANS_B, true>("wgmma_m64n" #N "k16_" #type "_rs", d, a, 0, desc_b,        \
                                                      scale_d, line.n);                                           \
    }
#define COURSE_WGMMA(N) COURSE_WGMMA_FORMS(N, f16, false) COURSE_WGMMA_FORMS(N, bf16, true)
COURSE_WGMMA_NS(COURSE_WGMMA)
#undef COURSE_WGMMA
#undef COURSE_WGMMA_FORMS

#define COURSE_TMA_COORDS_1 int c0
#define COURSE_TMA_COORDS_2 int c0, int c1
#define COURSE_TMA_COORDS_3 int c0, int c1, int c2
#define COURSE_TMA_COORDS_4 int c0, int c1, int c2, int c3
#define COURSE_TMA_COORDS_5 int c0, int c1, int c2, int c3, int c4
#define COURSE_TMA_LIST_1 c0
#define COURSE_TMA_LIST_2 c0, c1
#define COURSE_TMA_LIST_3 c0, c1, c2
#define COURSE_TMA_LIST_4 c0, c1, c2, c3
#define COURSE_TMA_LIST_5 c0, c1, c2, c3, c4
#define COURSE_TMA(N)                                                                                            \
    EMU_HOPPER_FN void tma_load_##N##d(void* dst, const CUtensorMap* map, COURSE_TMA_COORDS_##N,                 \
                                       unsigned long long* bar, emu::hopper::Line line = {__builtin_LINE()}) {    \
        const int c[N] = {COURSE_TMA_LIST_##N};                                                                   \
        emu_tma_load(dst, map, c, N, bar, line.n);                                                                \
    }                                                                                                             \
    EMU_HOPPER_FN void tma_store_##N##d(const CUtensorMap* map, COURSE_TMA_COORDS_##N, const void* src,          \
                                        emu::hopper::Line line = {__builtin_LINE()}) {                            \
        const int c[N] = {COURSE_TMA_LIST_##N};                                                                   \
        emu_tma_store(map, c, N, src, line.n);                                                                    \
    }
COURSE_TMA(1) COURSE_TMA(2) COURSE_TMA(3) COURSE_TMA(4) COURSE_TMA(5)
#undef COURSE_TMA
#undef COURSE_TMA_COORDS_1
#undef COURSE_TMA_COORDS_2
#undef COURSE_TMA_COORDS_3
#undef COURSE_TMA_COORDS_4
#undef COURSE_TMA_COORDS_5
#undef COURSE_TMA_LIST_1
#undef COURSE_TMA_LIST_2
#undef COURSE_TMA_LIST_3
#undef COURSE_TMA_LIST_4
#undef COURSE_TMA_LIST_5
EMU_HOPPER_FN void cp_async_bulk_commit_group(emu::hopper::Line line = {__builtin_LINE()}) { emu_bulk_commit(line.n); }
template <int N>
EMU_HOPPER_FN void cp_async_bulk_wait_group(emu::hopper::Line line = {__builtin_LINE()}) {
    static_assert(N >= 0 && N <= 63, "cp_async_bulk_wait_group<N>: N is 0..63");
    emu_bulk_wait(N, line.n);
}
// The emulator writes a store's global bytes at its wait, so waiting for the reads waits for all.
template <int N>
EMU_HOPPER_FN void cp_async_bulk_wait_group_read(emu::hopper::Line line = {__builtin_LINE()}) {
    static_assert(N >= 0 && N <= 63, "cp_async_bulk_wait_group_read<N>: N is 0..63");
    emu_bulk_wait(N, line.n);
}
EMU_HOPPER_FN void fence_proxy_tensormap_acquire(const CUtensorMap*) {}

template <int N>
EMU_HOPPER_FN void setmaxnreg_inc(emu::hopper::Line line = {__builtin_LINE()}) {
    static_assert(N >= 24 && N <= 256 && N % 8 == 0, "setmaxnreg_inc<N>: N is 24..256, a multiple of 8");
    emu_setmaxnreg(N, 1, line.n);
}
template <int N>
EMU_HOPPER_FN void setmaxnreg_dec(emu::hopper::Line line = {__builtin_LINE()}) {
    static_assert(N >= 24 && N <= 256 && N % 8 == 0, "setmaxnreg_dec<N>: N is 24..256, a multiple of 8");
    emu_setmaxnreg(N, 0, line.n);
}
EMU_HOPPER_FN bool elect_one_sync(emu::hopper::Line line = {__builtin_LINE()}) {
    const unsigned lanes = unsigned(emu_warp(::emu::kBallot, line.n, 0xffffffffu, 1, 0, 32));
    return (emu_ctx.cur->linear & 31u) == unsigned(__builtin_ctz(lanes));
}
#define EMU_STMATRIX(name, count, trans)                                                                         \
    EMU_HOPPER_FN void name(void* row, const unsigned r[count], emu::hopper::Line line = {__builtin_LINE()}) {   \
        emu::tensor::stmatrix<count, trans>(line.n, #name, row, r);                                             \
    }
EMU_STMATRIX(stmatrix_x1, 1, false)
EMU_STMATRIX(stmatrix_x2, 2, false)
EMU_STMATRIX(stmatrix_x4, 4, false)
EMU_STMATRIX(stmatrix_x1_trans, 1, true)
EMU_STMATRIX(stmatrix_x2_trans, 2, true)
EMU_STMATRIX(stmatrix_x4_trans, 4, true)
#undef EMU_STMATRIX
#undef EMU_HOPPER_FN

#else  // a GPU: the PTX instructions themselves (sm_90a)

#define COURSE_SMEM(p) static_cast<unsigned>(__cvta_generic_to_shared(p))
__device__ __forceinline__ void mbarrier_init(unsigned long long* bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(COURSE_SMEM(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ unsigned long long mbarrier_arrive(unsigned long long* bar) {
    unsigned long long state;
    asm volatile("mbarrier.arrive.shared::cta.b64 %0, [%1];" : "=l"(state) : "r"(COURSE_SMEM(bar)) : "memory");
    return state;
}
__device__ __forceinline__ unsigned long long mbarrier_arrive_expect_tx(unsigned long long* bar, unsigned bytes) {
    unsigned long long state;
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 %0, [%1], %2;"
                 : "=l"(state) : "r"(COURSE_SMEM(bar)), "r"(bytes) : "memory");
    return state;
}
__device__ __forceinline__ void mbarrier_expect_tx(unsigned long long* bar, unsigned bytes) {
    asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;" ::"r"(COURSE_SMEM(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ bool mbarrier_try_wait_parity(unsigned long long* bar, unsigned parity) {
    unsigned done;
    asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n\t}"
                 : "=r"(done) : "r"(COURSE_SMEM(bar)), "r"(parity) : "memory");
    return done != 0;
}
__device__ __forceinline__ void fence_mbarrier_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit_group() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait_group() {
    static_assert(N >= 0 && N <= 7, "wgmma_wait_group<N>: N, the groups left pending, is 0..7");
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
#undef COURSE_SMEM

// The accumulators are read-write operands ("+f"): the asm statement orders them after the
// registers' last write and before their next read, which wgmma_fence and wgmma_wait_group order
// on the hardware. scale_d becomes the predicate the instruction takes.
#define COURSE_WGMMA_FORMS(N, type)                                                                               \
    template <int TRANS_A = 0, int TRANS_B = 0>                                                                   \
    __device__ __forceinline__ void wgmma_m64n##N##k16_##type##_ss(float (&d)[N / 2], unsigned long long desc_a,  \
                                                                   unsigned long long desc_b, int scale_d = 1) {  \
        static_assert((TRANS_A == 0 || TRANS_A == 1) && (TRANS_B == 0 || TRANS_B == 1),                           \
                      "wgmma: TRANS_A and TRANS_B are 0 (K-major) or 1 (M- or N-major)");                         \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " COURSE_WGMMA_SS_P_##N ", 0;\n"                           \
                     "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." #type "." #type " "                        \
                     COURSE_WGMMA_R_##N ", " COURSE_WGMMA_SS_##N "\n}\n"                                          \
                     : COURSE_WGMMA_D_##N                                                                         \
                     : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TRANS_A), "n"(TRANS_B));                       \
    }                                                                                                             \
    template <int TRANS_B = 0>                                                                                    \
    __device__ __forceinline__ void wgmma_m64n##N##k16_##type##_rs(float (&d)[N / 2], const unsigned (&a)[4],    \
                                                                   unsigned long long desc_b, int scale_d = 1) {  \
        static_assert(TRANS_B == 0 || TRANS_B == 1, "wgmma: TRANS_B is 0 (K-major) or 1 (N-major)");              \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " COURSE_WGMMA_RS_P_##N ", 0;\n"                           \
                     "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." #type "." #type " "                        \
                     COURSE_WGMMA_R_##N ", " COURSE_WGMMA_RS_##N "\n}\n"                                          \
                     : COURSE_WGMMA_D_##N                                                                         \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TRANS_B));      \
    }
#define COURSE_WGMMA(N) COURSE_WGMMA_FORMS(N, f16) COURSE_WGMMA_FORMS(N, bf16)
COURSE_WGMMA_NS(COURSE_WGMMA)
#undef COURSE_WGMMA
#undef COURSE_WGMMA_FORMS

// TMA. The map is a generic address of global memory, as the instruction's tensor-map operand
// allows; coordinates are 32-bit signed, innermost first.
#define COURSE_SMEM(p) static_cast<unsigned>(__cvta_generic_to_shared(p))
__device__ __forceinline__ void fence_proxy_tensormap_acquire(const CUtensorMap* map) {
    asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;" ::"l"(map) : "memory");
}
__device__ __forceinline__ void tma_load_1d(void* dst, const CUtensorMap* map, int c0, unsigned long long* bar) {
    asm volatile("cp.async.bulk.tensor.1d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2}], [%3];"
                 ::"r"(COURSE_SMEM(dst)), "l"(map), "r"(c0), "r"(COURSE_SMEM(bar)) : "memory");
}
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, int c0, int c1, unsigned long long* bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                 ::"r"(COURSE_SMEM(dst)), "l"(map), "r"(c0), "r"(c1), "r"(COURSE_SMEM(bar)) : "memory");
}
__device__ __forceinline__ void tma_load_3d(void* dst, const CUtensorMap* map, int c0, int c1, int c2, unsigned long long* bar) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];"
                 ::"r"(COURSE_SMEM(dst)), "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(COURSE_SMEM(bar)) : "memory");
}
__device__ __forceinline__ void tma_load_4d(void* dst, const CUtensorMap* map, int c0, int c1, int c2, int c3,
                                            unsigned long long* bar) {
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];"
                 ::"r"(COURSE_SMEM(dst)), "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(COURSE_SMEM(bar)) : "memory");
}
__device__ __forceinline__ void tma_load_5d(void* dst, const CUtensorMap* map, int c0, int c1, int c2, int c3, int c4,
                                            unsigned long long* bar) {
    asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5, %6}], [%7];"
                 ::"r"(COURSE_SMEM(dst)), "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4), "r"(COURSE_SMEM(bar))
                 : "memory");
}
__device__ __forceinline__ void tma_store_1d(const CUtensorMap* map, int c0, const void* src) {
    asm volatile("cp.async.bulk.tensor.1d.global.shared::cta.tile.bulk_group [%0, {%1}], [%2];"
                 ::"l"(map), "r"(c0), "r"(COURSE_SMEM(src)) : "memory");
}
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, int c0, int c1, const void* src) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%1, %2}], [%3];"
                 ::"l"(map), "r"(c0), "r"(c1), "r"(COURSE_SMEM(src)) : "memory");
}
__device__ __forceinline__ void tma_store_3d(const CUtensorMap* map, int c0, int c1, int c2, const void* src) {
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group [%0, {%1, %2, %3}], [%4];"
                 ::"l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(COURSE_SMEM(src)) : "memory");
}
__device__ __forceinline__ void tma_store_4d(const CUtensorMap* map, int c0, int c1, int c2, int c3, const void* src) {
    asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group [%0, {%1, %2, %3, %4}], [%5];"
                 ::"l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(COURSE_SMEM(src)) : "memory");
}
__device__ __forceinline__ void tma_store_5d(const CUtensorMap* map, int c0, int c1, int c2, int c3, int c4, const void* src) {
    asm volatile("cp.async.bulk.tensor.5d.global.shared::cta.tile.bulk_group [%0, {%1, %2, %3, %4, %5}], [%6];"
                 ::"l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4), "r"(COURSE_SMEM(src)) : "memory");
}
#undef COURSE_SMEM
__device__ __forceinline__ void cp_async_bulk_commit_group() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_bulk_wait_group() {
    static_assert(N >= 0 && N <= 63, "cp_async_bulk_wait_group<N>: N is 0..63");
    asm volatile("cp.async.bulk.wait_group %0;" ::"n"(N) : "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_bulk_wait_group_read() {
    static_assert(N >= 0 && N <= 63, "cp_async_bulk_wait_group_read<N>: N is 0..63");
    asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}

template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
    static_assert(N >= 24 && N <= 256 && N % 8 == 0, "setmaxnreg_inc<N>: N is 24..256, a multiple of 8");
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
    static_assert(N >= 24 && N <= 256 && N % 8 == 0, "setmaxnreg_dec<N>: N is 24..256, a multiple of 8");
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}
__device__ __forceinline__ bool elect_one_sync() {
    unsigned elected;
    asm volatile("{\n\t.reg .b32 lane;\n\t.reg .pred p;\n\telect.sync lane|p, 0xffffffff;\n\tselp.u32 %0, 1, 0, p;\n\t}"
                 : "=r"(elected));
    return elected != 0;
}
#define COURSE_SMEM(row) static_cast<unsigned>(__cvta_generic_to_shared(row))
__device__ __forceinline__ void stmatrix_x1(void* row, const unsigned r[1]) {
    asm volatile("stmatrix.sync.aligned.m8n8.x1.shared.b16 [%0], {%1};" ::"r"(COURSE_SMEM(row)), "r"(r[0]) : "memory");
}
__device__ __forceinline__ void stmatrix_x2(void* row, const unsigned r[2]) {
    asm volatile("stmatrix.sync.aligned.m8n8.x2.shared.b16 [%0], {%1, %2};" ::"r"(COURSE_SMEM(row)), "r"(r[0]), "r"(r[1])
                 : "memory");
}
__device__ __forceinline__ void stmatrix_x4(void* row, const unsigned r[4]) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};"
                 ::"r"(COURSE_SMEM(row)), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
}
__device__ __forceinline__ void stmatrix_x1_trans(void* row, const unsigned r[1]) {
    asm volatile("stmatrix.sync.aligned.m8n8.x1.trans.shared.b16 [%0], {%1};" ::"r"(COURSE_SMEM(row)), "r"(r[0]) : "memory");
}
__device__ __forceinline__ void stmatrix_x2_trans(void* row, const unsigned r[2]) {
    asm volatile("stmatrix.sync.aligned.m8n8.x2.trans.shared.b16 [%0], {%1, %2};"
                 ::"r"(COURSE_SMEM(row)), "r"(r[0]), "r"(r[1]) : "memory");
}
__device__ __forceinline__ void stmatrix_x4_trans(void* row, const unsigned r[4]) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};"
                 ::"r"(COURSE_SMEM(row)), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
}
#undef COURSE_SMEM

#endif

// The matrix descriptor is plain bits: one definition for both backends.
template <int SWIZZLE>
__device__ __forceinline__ unsigned long long make_smem_desc(const void* tile, unsigned leading_bytes, unsigned stride_bytes) {
    static_assert(SWIZZLE == 0 || SWIZZLE == 32 || SWIZZLE == 64 || SWIZZLE == 128,
                  "make_smem_desc<SWIZZLE>: the swizzle is 0 (none), 32, 64 or 128 bytes");
    constexpr unsigned long long mode = SWIZZLE == 128 ? 1 : SWIZZLE == 64 ? 2 : SWIZZLE == 32 ? 3 : 0;
    const unsigned long long addr = static_cast<unsigned>(__cvta_generic_to_shared(tile));
    return (addr & 0x3ffff) >> 4 | (unsigned long long)((leading_bytes & 0x3ffff) >> 4) << 16 |
           (unsigned long long)((stride_bytes & 0x3ffff) >> 4) << 32 | mode << 62;
}

// course_async.cuh: cp.async, copies from global to shared memory that run in the background
// while the thread computes (sm_80 and later). Each thread issues its own copies:
//
//   cp_async_cg16(dst, src)   16 bytes, bypassing L1 (cp.async.cg): the usual tile load.
//   cp_async_ca<B>(dst, src)  B = 4, 8 or 16 bytes, through L1 (cp.async.ca). A template rather
//                             than three functions: the size is part of the instruction, so it
//                             must be a compile-time constant, and a wrong B fails to compile.
//   cp_async_cg16_zfill(dst, src, src_bytes)
//                             16 bytes of which only the first src_bytes (0..16) come from src;
//                             the rest are zeros. src_bytes = 0 reads nothing (src may then point
//                             anywhere): the idiom for rows or columns past the end of a tail tile.
//   cp_async_commit()         closes this thread's current group of copies.
//   cp_async_wait<N>()        waits until at most the newest N committed groups are still in
//                             flight: all older groups have landed (cp.async.wait_group N).
//   cp_async_wait_all()       commits, then waits for every copy (cp.async.wait_all).
//
// dst must be in shared memory, src in global memory, both aligned to the copy's size. A copy has
// landed only after the issuing thread's wait; other threads may read it only after that wait AND
// a __syncthreads(). The double-buffered loop: issue tile 0, commit; in each step issue tile k+1,
// commit, cp_async_wait<1>() (tile k has landed), __syncthreads(), compute on tile k,
// __syncthreads() (before tile k's buffer is overwritten).
//
// Named barriers, for warps with different roles (a producer warp that copies, consumer warps that
// compute): a barrier that only `count` threads (a multiple of 32) meet at, among the 16 a block
// has (ids 1..15; 0 is __syncthreads()'s).
//
//   named_barrier_sync(id, count)    counts this thread and waits until `count` threads have
//                                    arrived at barrier `id` in this phase (bar.sync id, count).
//   named_barrier_arrive(id, count)  counts this thread and goes on (bar.arrive id, count): a
//                                    producer announcing a full buffer, a consumer an empty one.
//
// What a thread wrote before it arrived is visible to the threads that wait at that phase, after
// they are released; an arriving thread learns nothing from the others.
//
// On the CPU emulator (__CUDA_EMULATOR__) the same calls run in emu_async.hpp: the copy is
// deferred to the wait, an early read of the destination shows 0xFF bytes (NaN), and the traced
// build names the read, the copy and the missing wait.
#pragma once

#ifdef __CUDA_EMULATOR__
#include "emu_async.hpp"

#define EMU_ASYNC_FN inline __attribute__((always_inline))
EMU_ASYNC_FN void cp_async_cg16(void* smem_dst, const void* gmem_src, emu::async::Line line = {__builtin_LINE()}) {
    emu::async::copy(line.n, smem_dst, gmem_src, 16, 16);
}
template <int BYTES>
EMU_ASYNC_FN void cp_async_ca(void* smem_dst, const void* gmem_src, emu::async::Line line = {__builtin_LINE()}) {
    static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "cp_async_ca<BYTES>: cp.async.ca copies 4, 8 or 16 bytes");
    emu::async::copy(line.n, smem_dst, gmem_src, BYTES, BYTES);
}
EMU_ASYNC_FN void cp_async_cg16_zfill(void* smem_dst, const void* gmem_src, int src_bytes,
                                      emu::async::Line line = {__builtin_LINE()}) {
    // A negative count becomes a huge one, which the launcher reports as more than 16.
    emu::async::copy(line.n, smem_dst, gmem_src, 16, unsigned(src_bytes));
}
EMU_ASYNC_FN void cp_async_commit(emu::async::Line line = {__builtin_LINE()}) { emu::async::commit(line.n); }
template <int N>
EMU_ASYNC_FN void cp_async_wait(emu::async::Line line = {__builtin_LINE()}) {
    static_assert(N >= 0, "cp_async_wait<N>: N counts groups left in flight, so N >= 0");
    emu::async::wait(line.n, N);
}
EMU_ASYNC_FN void cp_async_wait_all(emu::async::Line line = {__builtin_LINE()}) { emu::async::wait_all(line.n); }
EMU_ASYNC_FN void named_barrier_sync(int id, int count, emu::async::Line line = {__builtin_LINE()}) {
    emu_named_barrier(id, count, 0, line.n);
}
EMU_ASYNC_FN void named_barrier_arrive(int id, int count, emu::async::Line line = {__builtin_LINE()}) {
    emu_named_barrier(id, count, 1, line.n);
}
#undef EMU_ASYNC_FN

#else  // a GPU: the PTX instructions themselves (sm_80 and later)

// cp.async takes a shared-state-space destination; the global source passes as the generic
// pointer, which is the global address on every architecture that has cp.async. "memory" keeps the
// compiler from moving the instructions across this thread's own loads and stores.
#define COURSE_SMEM(p) static_cast<unsigned>(__cvta_generic_to_shared(p))
__device__ __forceinline__ void cp_async_cg16(void* smem_dst, const void* gmem_src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(COURSE_SMEM(smem_dst)), "l"(gmem_src) : "memory");
}
template <int BYTES>
__device__ __forceinline__ void cp_async_ca(void* smem_dst, const void* gmem_src) {
    static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "cp_async_ca<BYTES>: cp.async.ca copies 4, 8 or 16 bytes");
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(COURSE_SMEM(smem_dst)), "l"(gmem_src), "n"(BYTES)
                 : "memory");
}
__device__ __forceinline__ void cp_async_cg16_zfill(void* smem_dst, const void* gmem_src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(COURSE_SMEM(smem_dst)), "l"(gmem_src),
                 "r"(src_bytes)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    static_assert(N >= 0, "cp_async_wait<N>: N counts groups left in flight, so N >= 0");
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }
__device__ __forceinline__ void named_barrier_sync(int id, int count) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int count) {
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(count) : "memory");
}
#undef COURSE_SMEM

#endif

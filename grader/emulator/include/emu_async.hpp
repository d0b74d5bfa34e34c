// emu_async.hpp: cp.async on the CPU emulator. course_async.cuh (cp_async_cg16, cp_async_wait<N>,
// ...) and cuda_pipeline_primitives.h (__pipeline_memcpy_async, ...) both call these.
//
// The copy is deferred, as on a GPU: the launcher (async.cpp) checks the addresses, takes the
// source bytes and poisons the destination at issue; the bytes land in shared memory at the
// cp_async_wait that retires their group. What the traced build must see happens here or is
// attributed to the caller's code address: everything below is always inlined into the kernel, so
// the source read is a traced load on the student's line, and the launcher books the landing write
// at the return address of emu_cp_async_wait, which is the student's wait.
#pragma once
#include "emu_abi.hpp"

namespace emu::async {

#define EMU_ASYNC_FN inline __attribute__((always_inline))

// The caller's line, as the last parameter (a class, so a stray extra argument is a compile error).
struct Line {
    int n;
};

#ifdef EMU_COUNT_IO
// Byte-aligned types: the launcher has checked alignment against the array's start, which is
// what a GPU requires; the absolute address need not be a multiple here.
typedef unsigned V16 __attribute__((vector_size(16), aligned(1)));
typedef unsigned V8 __attribute__((vector_size(8), aligned(1)));
typedef unsigned U4 __attribute__((aligned(1)));
typedef unsigned short U2 __attribute__((aligned(1)));

// One traced load per power-of-two piece, largest first (so each piece stays aligned): a 16-byte
// copy is one 16-byte global read, as the GPU's LDGSTS is, for the IO counters, the race detector
// and the memory profiler. Volatile, so that the unused value is still loaded.
EMU_ASYNC_FN void traced_read(const void* src, unsigned n) {
    const unsigned char* p = static_cast<const unsigned char*>(src);
    if (n >= 16) (void)*reinterpret_cast<const volatile V16*>(p), p += 16, n -= 16;
    if (n >= 8) (void)*reinterpret_cast<const volatile V8*>(p), p += 8, n -= 8;
    if (n >= 4) (void)*reinterpret_cast<const volatile U4*>(p), p += 4, n -= 4;
    if (n >= 2) (void)*reinterpret_cast<const volatile U2*>(p), p += 2, n -= 2;
    if (n >= 1) (void)*reinterpret_cast<const volatile unsigned char*>(p);
}
#endif

// The launcher books a copy's write at the return address of its call, so that call must return
// into the kernel: this empty statement after it keeps the compiler from making it a tail call
// (a jump whose return address would be the kernel's caller).
#define EMU_ASYNC_KEEP_RETURN() asm volatile("")

// Copy `bytes` (4, 8 or 16) from global `src` to shared `dst`, of which only the first `src_bytes`
// come from src; the rest are zeros.
EMU_ASYNC_FN void copy(int line, void* dst, const void* src, unsigned bytes, unsigned src_bytes) {
    emu_cp_async(dst, src, bytes, src_bytes, line);  // checks first: the read below is then safe
    EMU_ASYNC_KEEP_RETURN();
#ifdef EMU_COUNT_IO
    traced_read(src, src_bytes);
#endif
}

EMU_ASYNC_FN void commit(int line) { emu_cp_async_commit(line); }
EMU_ASYNC_FN void wait(int line, int pending) {
    emu_cp_async_wait(pending, line);
    EMU_ASYNC_KEEP_RETURN();
}
EMU_ASYNC_FN void wait_all(int line) {
    emu_cp_async_wait_all(line);
    EMU_ASYNC_KEEP_RETURN();
}

#undef EMU_ASYNC_KEEP_RETURN
#undef EMU_ASYNC_FN

}  // namespace emu::async

// CUDA's conversions between a generic pointer and a shared-window address: on the emulator, as on
// a GPU, a small offset in the block's shared memory (emu_smem_window in emu_abi.hpp), which keeps
// every address's position in the swizzle patterns of TMA and wgmma.
inline size_t __cvta_generic_to_shared(const void* p, int line = __builtin_LINE()) { return emu_smem_window(p, line); }
inline void* __cvta_shared_to_generic(size_t a, int line = __builtin_LINE()) { return emu_smem_pointer(unsigned(a), 1, line); }

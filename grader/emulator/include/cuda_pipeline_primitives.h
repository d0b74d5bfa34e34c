// cuda_pipeline_primitives.h on the CPU emulator: CUDA's C spelling of cp.async, so NVIDIA's sample
// code runs unchanged (on a GPU, NVRTC finds CUDA's own header of this name). The copies are those
// of course_async.cuh, deferred to the wait (see emu_async.hpp).
//
//   __pipeline_memcpy_async(dst, src, size_and_align, zfill = 0)
//       cp.async of size_and_align bytes (4, 8 or 16), global src -> shared dst, both aligned to
//       it; the last `zfill` bytes are zeros instead of source bytes.
//   __pipeline_commit()          closes this thread's current group (cp.async.commit_group)
//   __pipeline_wait_prior(N)     waits until at most the newest N groups are in flight; N above 8
//                                counts as 8, as in CUDA's header (cp.async.wait_group)
//
// __pipeline_arrive_on (mbarrier completion) is not emulated.
#pragma once
#include "emu_async.hpp"

inline __attribute__((always_inline)) void __pipeline_memcpy_async(void* dst_shared, const void* src_global,
                                                                   size_t size_and_align, size_t zfill = 0,
                                                                   emu::async::Line line = {__builtin_LINE()}) {
    if (zfill > size_and_align)
        emu_usage_error(line.n, "__pipeline_memcpy_async: zfill = %zu is more than the %zu bytes copied", zfill,
                        size_and_align);
    emu::async::copy(line.n, dst_shared, src_global, unsigned(size_and_align), unsigned(size_and_align - zfill));
}

inline __attribute__((always_inline)) void __pipeline_commit(emu::async::Line line = {__builtin_LINE()}) {
    emu::async::commit(line.n);
}

inline __attribute__((always_inline)) void __pipeline_wait_prior(size_t prior, emu::async::Line line = {__builtin_LINE()}) {
    emu::async::wait(line.n, prior < 8 ? int(prior) : 8);
}

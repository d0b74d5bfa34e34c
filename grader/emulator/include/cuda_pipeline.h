// cuda_pipeline.h on the CPU emulator: the primitives (cuda_pipeline_primitives.h) and CUDA's C++
// pipeline object, nvcuda::experimental::pipeline, over the same deferred cp.async.
#pragma once
#include "cuda_pipeline_primitives.h"

namespace nvcuda::experimental {

class pipeline {
public:
    pipeline() = default;
    pipeline(const pipeline&) = delete;
    pipeline& operator=(const pipeline&) = delete;

    // Closes the current batch (group); returns its number.
    size_t commit(emu::async::Line line = {__builtin_LINE()}) {
        emu::async::commit(line.n);
        return batch_++;
    }
    void commit_and_wait(emu::async::Line line = {__builtin_LINE()}) {
        commit(line);
        emu::async::wait(line.n, 0);
    }
    // CUDA's formula, kept as it is: wait_prior(batches committed - batch), which leaves batch
    // number `batch` itself in flight when it was the last one committed.
    void wait(size_t batch, emu::async::Line line = {__builtin_LINE()}) {
        const size_t prior = batch_ > batch ? batch_ - batch : 0;
        emu::async::wait(line.n, prior < 8 ? int(prior) : 8);
    }
    template <unsigned N>
    void wait_prior(emu::async::Line line = {__builtin_LINE()}) {
        emu::async::wait(line.n, N < 8 ? int(N) : 8);
    }

private:
    size_t batch_ = 0;
};

// One element of 4, 8 or 16 bytes, as one cp.async (CUDA's header also takes other sizes, split
// into several copies or copied at once; this one stops at compile time instead).
template <class T>
void memcpy_async(T& dst, const T& src, pipeline&, emu::async::Line line = {__builtin_LINE()}) {
    static_assert(sizeof(T) == 4 || sizeof(T) == 8 || sizeof(T) == 16,
                  "memcpy_async(T&, const T&, pipeline&) here copies 4-, 8- or 16-byte elements");
    emu::async::copy(line.n, &dst, &src, sizeof(T), sizeof(T));
}

// A segment of DstN elements of which the first SrcN come from src, the rest zero-filled.
template <class T, size_t DstN, size_t SrcN>
void memcpy_async(T (*dst)[DstN], const T (*src)[SrcN], pipeline&, emu::async::Line line = {__builtin_LINE()}) {
    static_assert(sizeof(*dst) == 4 || sizeof(*dst) == 8 || sizeof(*dst) == 16, "Unsupported copy size.");
    static_assert(sizeof(*src) <= sizeof(*dst), "Source size must be less than or equal to destination size.");
    emu::async::copy(line.n, *dst, *src, sizeof(*dst), sizeof(*src));
}

template <size_t N, class T>
auto segment(T* ptr) -> T (*)[N] {
    return (T(*)[N])ptr;
}

}  // namespace nvcuda::experimental

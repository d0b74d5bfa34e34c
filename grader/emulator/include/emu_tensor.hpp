// emu_tensor.hpp: mma.sync and ldmatrix on the CPU emulator (course_tensor.cuh includes it under
// __CUDA_EMULATOR__; the GPU gets inline PTX instead). The fragment layouts come from
// emu_fragments.hpp, generated from grader/fragments.py.
//
// Each primitive is one warp exchange (emu_warp_exchange): every lane hands in its registers, the
// last lane to arrive computes all 32 lanes' results, and a lane that never arrives is reported as
// a deadlock. Memory is touched only by the lanes themselves, before the exchange, so the race
// detector and the IO counters see each access made by the lane that makes it on a GPU.
//
// The public functions end with a `Line` parameter defaulting to the caller's line, so reports
// name the student's line while the calls stay those of the GPU version.
#pragma once
#include "emu_fragments.hpp"
#include "emu_widen.hpp"

namespace emu::tensor {

constexpr unsigned kFullWarp = 0xffffffffu;

// The caller's line, as the last parameter: `Line line = Line{__builtin_LINE()}`. A class rather
// than an int, so that a stray extra argument (a layout enum, a number) is a compile error.
struct Line {
    int n;
};

// ----------------------------------------------------------------------------- mma.sync

struct MmaIn {
    unsigned a[4], b[2];
    float c[4];
};

// D = A * B + C for the whole warp. Products of 16-bit values are exact in double and the sums
// of an m16n8k16 lose nothing that matters; one rounding to float at the end.
template <int K, bool BF16>
void mma_combine(const void* const* in, void* const* out, unsigned, const void*) {
    double A[16][K], B[K][8], D[16][8];
    for (int lane = 0; lane < 32; ++lane) {
        const MmaIn& m = *static_cast<const MmaIn*>(in[lane]);
        for (int r = 0; r < K / 4; ++r)
            for (int h = 0; h < 2; ++h) {
                frag::RowCol p;
                if constexpr (K == 16) p = frag::kA16[lane][r][h]; else p = frag::kA8[lane][r][h];
                A[p.row][p.col] = widen<BF16>(m.a[r] >> 16 * h);
            }
        for (int r = 0; r < K / 8; ++r)
            for (int h = 0; h < 2; ++h) {
                frag::RowCol p;
                if constexpr (K == 16) p = frag::kB16[lane][r][h]; else p = frag::kB8[lane][r][h];
                B[p.row][p.col] = widen<BF16>(m.b[r] >> 16 * h);
            }
        for (int i = 0; i < 4; ++i) D[frag::kC[lane][i].row][frag::kC[lane][i].col] = m.c[i];
    }
    for (int i = 0; i < 16; ++i)
        for (int j = 0; j < 8; ++j) {
            double s = D[i][j];
            for (int k = 0; k < K; ++k) s += A[i][k] * B[k][j];
            D[i][j] = s;
        }
    for (int lane = 0; lane < 32; ++lane) {
        float* d = static_cast<float*>(out[lane]);
        for (int i = 0; i < 4; ++i) d[i] = static_cast<float>(D[frag::kC[lane][i].row][frag::kC[lane][i].col]);
    }
}

// Always inlined, as are the course header's wrappers: a lane's traced reads then sit on the
// student's line, where the race detector and the memory profiler report them.
template <int K, bool BF16>
inline __attribute__((always_inline)) void mma(int line, const char* what, float* d, const unsigned* a, const unsigned* b, const float* c) {
    MmaIn in;
    for (int r = 0; r < K / 4; ++r) in.a[r] = a[r];
    for (int r = 0; r < K / 8; ++r) in.b[r] = b[r];
    for (int i = 0; i < 4; ++i) in.c[i] = c[i];
    float res[4];  // d may alias c, and may even live in shared memory: the lane writes it itself
    emu_warp_exchange(line, what, kFullWarp, &in, res, &mma_combine<K, BF16>, nullptr);
    for (int i = 0; i < 4; ++i) d[i] = res[i];
}

// ----------------------------------------------------------------------------- ldmatrix

typedef unsigned Row16 __attribute__((vector_size(16)));
typedef unsigned short Half16 __attribute__((may_alias));

template <int N, bool TRANS>
void ldmatrix_combine(const void* const* in, void* const* out, unsigned, const void*) {
    for (int lane = 0; lane < 32; ++lane) {
        unsigned* r = static_cast<unsigned*>(out[lane]);
        for (int m = 0; m < N; ++m) {
            unsigned v = 0;
            for (int h = 0; h < 2; ++h) {
                const frag::RowCol p = frag::kLdmatrix[TRANS][lane][h];
                v |= unsigned(static_cast<const Half16*>(in[8 * m + p.row])[p.col]) << 16 * h;
            }
            r[m] = v;
        }
    }
}

// A row address of ldmatrix or stmatrix: 16 bytes of shared memory, 16-byte aligned.
inline void check_row(int line, const char* what, unsigned lane, const void* row, const char* verb) {
    if (reinterpret_cast<uintptr_t>(row) % 16)
        emu_usage_error(line, "%s: lane %u's row address %p is not 16-byte aligned (row addresses must be "
                        "multiples of 16 bytes)", what, lane, row);
    if (!emu_in_shared(row, 16))
        emu_usage_error(line, "%s: lane %u's row (16 bytes at %p) is not in shared memory%s; %s only __shared__ memory",
                        what, lane, row, emu_in_global(row, 16) ? " (it points into an array argument, global memory)" : "",
                        verb);
}

template <int N, bool TRANS>
inline __attribute__((always_inline)) void ldmatrix(int line, const char* what, unsigned* r, const void* row) {
    const unsigned lane = emu_ctx.cur->linear % 32u;
    Row16 mine = {0, 0, 0, 0};
    // Only the lanes whose addresses this form uses read (x1: lanes 0-7, x2: 0-15, x4: all).
    if (lane < 8u * N) {
        check_row(line, what, lane, row, "ldmatrix reads");
        mine = *static_cast<const Row16*>(row);
    }
    unsigned res[N];
    emu_warp_exchange(line, what, kFullWarp, &mine, res, &ldmatrix_combine<N, TRANS>, nullptr);
    for (int m = 0; m < N; ++m) r[m] = res[m];
}

// ----------------------------------------------------------------------------- stmatrix

// The inverse of ldmatrix: each lane hands in its N registers; lane 8m + j, whose address is row j
// of matrix m, receives that row's 16 bytes and stores them itself (a traced store on its line).
template <int N, bool TRANS>
void stmatrix_combine(const void* const* in, void* const* out, unsigned, const void*) {
    for (int lane = 0; lane < 32; ++lane) {
        const unsigned* r = static_cast<const unsigned*>(in[lane]);
        for (int m = 0; m < N; ++m)
            for (int h = 0; h < 2; ++h) {
                const frag::RowCol p = frag::kLdmatrix[TRANS][lane][h];
                static_cast<Half16*>(out[8 * m + p.row])[p.col] = Half16(r[m] >> 16 * h);
            }
    }
}

template <int N, bool TRANS>
inline __attribute__((always_inline)) void stmatrix(int line, const char* what, void* row, const unsigned* r) {
    const unsigned lane = emu_ctx.cur->linear % 32u;
    if (lane < 8u * N) check_row(line, what, lane, row, "stmatrix writes");
    unsigned mine[N];
    for (int m = 0; m < N; ++m) mine[m] = r[m];
    Row16 got = {0, 0, 0, 0};
    emu_warp_exchange(line, what, kFullWarp, mine, &got, &stmatrix_combine<N, TRANS>, nullptr);
    if (lane < 8u * N) *static_cast<Row16*>(row) = got;
}

}  // namespace emu::tensor

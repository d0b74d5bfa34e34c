// mma.h for the CPU emulator: the WMMA API (nvcuda::wmma) for 16x16x16 tiles, __half or
// __nv_bfloat16 inputs and a float accumulator. On a GPU, <mma.h> is CUDA's own.
//
// CUDA leaves the order of a fragment's elements (frag.x[i]) unspecified; the emulator's order is
// grader/fragments.py's wmma_element (built from the mma.m16n8k16 fragments). Code that only
// treats every element alike (scaling, fill, conversion) is portable; code that assumes an
// element's row and column is not. As in CUDA, __half matrix_a/matrix_b fragments have 16
// elements: here 8-15 repeat 0-7, and mma_sync reads 0-7.
//
// Checked, as CUDA requires: the pointer is 32-byte aligned; ldm is a multiple of 8 elements for
// 16-bit types and of 4 for float (16 bytes); every lane of the warp calls the function with the
// same pointer, ldm and layout; all 32 lanes arrive. Each lane reads or writes only its own
// elements, as on a GPU: the race detector sees exactly those accesses. Loads read before the
// warp meets and stores write after it, so the collective orders nothing for the race detector:
// sharing a tile another lane wrote still needs __syncwarp or __syncthreads.
#pragma once
#include <type_traits>

#include "cuda_bf16.h"
#include "cuda_fp16.h"
#include "emu_tensor.hpp"

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class T, int N>
struct __frag_base {
    enum { num_elements = N, num_storage_elements = N };
    typedef T element_type;
    typedef T storage_element_type;
    T x[N];
};

template <class>
inline constexpr bool __emu_unsupported = false;

template <class Use, int m, int n, int k, class T, class Layout = void>
class fragment {
    static_assert(__emu_unsupported<T>,
                  "the emulator's WMMA has fragment<matrix_a or matrix_b, 16, 16, 16, __half or __nv_bfloat16, "
                  "row_major or col_major> and fragment<accumulator, 16, 16, 16, float> only");
};

#define EMU_WMMA_INPUT(use, type, layout, n) \
    template <>                              \
    class fragment<use, 16, 16, 16, type, layout> : public __frag_base<type, n> {};
EMU_WMMA_INPUT(matrix_a, __half, row_major, 16)
EMU_WMMA_INPUT(matrix_a, __half, col_major, 16)
EMU_WMMA_INPUT(matrix_b, __half, row_major, 16)
EMU_WMMA_INPUT(matrix_b, __half, col_major, 16)
EMU_WMMA_INPUT(matrix_a, __nv_bfloat16, row_major, 8)
EMU_WMMA_INPUT(matrix_a, __nv_bfloat16, col_major, 8)
EMU_WMMA_INPUT(matrix_b, __nv_bfloat16, row_major, 8)
EMU_WMMA_INPUT(matrix_b, __nv_bfloat16, col_major, 8)
#undef EMU_WMMA_INPUT
template <>
class fragment<accumulator, 16, 16, 16, float> : public __frag_base<float, 8> {};

template <class T, int N>
inline void fill_fragment(__frag_base<T, N>& f, const std::type_identity_t<T>& v) {
    for (int i = 0; i < N; ++i) f.x[i] = v;
}

}  // namespace wmma
}  // namespace nvcuda

namespace emu::wmma {

namespace w = ::nvcuda::wmma;
typedef unsigned short Bits16 __attribute__((may_alias));

// What every lane must agree on; the exchange hands each lane lane 0's copy to compare with.
struct Call {
    const void* p;
    unsigned ldm;
    int layout;
};

inline void same_as_lane0(const void* const* in, void* const* out, unsigned, const void*) {
    for (int lane = 0; lane < 32; ++lane) *static_cast<Call*>(out[lane]) = *static_cast<const Call*>(in[0]);
}

// Alignment, ldm and where the 16x16 tile lies, before the lane touches memory.
template <class T>
inline void check(int line, const char* what, const T* p, unsigned ldm) {
    constexpr unsigned multiple = 16 / sizeof(T);
    if (ldm % multiple)
        emu_usage_error(line, "%s: ldm = %u is not a multiple of %u; for %u-byte elements CUDA requires ldm to be a "
                        "multiple of %u elements (16 bytes)", what, ldm, multiple, unsigned(sizeof(T)), multiple);
    const unsigned long span = (15ul * ldm + 16) * sizeof(T);
    if (emu_in_global(p, 1)) {
        // Each lane's own accesses bound-check the tile. The emulator starts the arrays of a kernel
        // that uses WMMA at multiples of 32 bytes, as cudaMalloc's are, so the address tells.
        if (reinterpret_cast<uintptr_t>(p) % 32)
            emu_usage_error(line, "%s: the pointer is %lu bytes past a multiple of 32 from the start of its array; "
                            "CUDA requires a 256-bit (32-byte) aligned pointer", what,
                            static_cast<unsigned long>(reinterpret_cast<uintptr_t>(p) % 32));
        return;
    }
    if (!emu_in_shared(p, span))
        emu_usage_error(line, "%s: the 16x16 tile at %p (ldm %u, %lu bytes) is neither in an array argument nor "
                        "inside shared memory", what, static_cast<const void*>(p), ldm, span);
    if (reinterpret_cast<uintptr_t>(p) % 32)
        emu_usage_error(line, "%s: the shared-memory pointer %p is not 32-byte aligned; CUDA requires a 256-bit "
                        "aligned pointer (declare the __shared__ array __align__(32) and start tiles at multiples "
                        "of 32 bytes)", what, static_cast<const void*>(p));
}

inline void meet(int line, const char* what, const void* p, unsigned ldm, int layout) {
    const Call mine{p, ldm, layout}, *self = &mine;
    Call first;
    emu_warp_exchange(line, what, tensor::kFullWarp, self, &first, &same_as_lane0, nullptr);
    if (first.p != p || first.ldm != ldm || first.layout != layout)
        emu_usage_error(line, "%s: every lane of the warp must pass the same pointer, ldm and layout; lane 0 passed "
                        "(%p, ldm %u, %s) but lane %u passed (%p, ldm %u, %s)", what, first.p, first.ldm,
                        first.layout ? "col-major" : "row-major", emu_ctx.cur->linear % 32u, p, ldm,
                        layout ? "col-major" : "row-major");
}

// The (row, col) of each of this lane's 8 elements.
template <class Use>
inline const frag::RowCol* cells(unsigned lane) {
    if constexpr (std::is_same_v<Use, w::matrix_a>)
        return frag::kWmmaA[lane];
    else if constexpr (std::is_same_v<Use, w::matrix_b>)
        return frag::kWmmaB[lane];
    else
        return frag::kWmmaC[lane];
}

inline unsigned lane() { return emu_ctx.cur->linear % 32u; }

template <class Use, class T, class L>
inline void load(w::fragment<Use, 16, 16, 16, T, L>& f, const T* p, unsigned ldm, bool col_major, int line) {
    constexpr const char* what = "wmma::load_matrix_sync";
    check(line, what, p, ldm);
    const frag::RowCol* cell = cells<Use>(lane());
    for (int i = 0; i < 8; ++i) {
        const unsigned at = col_major ? cell[i].col * ldm + cell[i].row : cell[i].row * ldm + cell[i].col;
        if constexpr (std::is_same_v<T, float>)
            f.x[i] = p[at];
        else
            f.x[i] = ::emu_math::from_bits<T>(reinterpret_cast<const Bits16*>(p)[at]);
    }
    for (int i = 8; i < f.num_elements; ++i) f.x[i] = f.x[i - 8];
    meet(line, what, p, ldm, col_major);
}

struct MmaIn {
    unsigned short a[8], b[8];
    float c[8];
};

template <bool BF16>
void mma_combine(const void* const* in, void* const* out, unsigned, const void*) {
    double A[16][16], B[16][16], D[16][16];
    for (int l = 0; l < 32; ++l) {
        const MmaIn& m = *static_cast<const MmaIn*>(in[l]);
        for (int i = 0; i < 8; ++i) {
            A[frag::kWmmaA[l][i].row][frag::kWmmaA[l][i].col] = emu::widen<BF16>(m.a[i]);
            B[frag::kWmmaB[l][i].row][frag::kWmmaB[l][i].col] = emu::widen<BF16>(m.b[i]);
            D[frag::kWmmaC[l][i].row][frag::kWmmaC[l][i].col] = m.c[i];
        }
    }
    for (int i = 0; i < 16; ++i)
        for (int j = 0; j < 16; ++j) {
            double s = D[i][j];
            for (int k = 0; k < 16; ++k) s += A[i][k] * B[k][j];
            D[i][j] = s;
        }
    for (int l = 0; l < 32; ++l) {
        float* d = static_cast<float*>(out[l]);
        for (int i = 0; i < 8; ++i) d[i] = static_cast<float>(D[frag::kWmmaC[l][i].row][frag::kWmmaC[l][i].col]);
    }
}

}  // namespace emu::wmma

namespace nvcuda {
namespace wmma {

template <class Use, class T, class L>
    requires(std::is_same_v<Use, matrix_a> || std::is_same_v<Use, matrix_b>)
inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, L>& a, const T* p, unsigned ldm,
                             ::emu::tensor::Line line = {__builtin_LINE()}) {
    ::emu::wmma::load(a, p, ldm, std::is_same_v<L, col_major>, line.n);
}

inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& a, const float* p, unsigned ldm,
                             layout_t layout, ::emu::tensor::Line line = {__builtin_LINE()}) {
    ::emu::wmma::load(a, p, ldm, layout == mem_col_major, line.n);
}

inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& a, unsigned ldm,
                              layout_t layout, ::emu::tensor::Line line = {__builtin_LINE()}) {
    constexpr const char* what = "wmma::store_matrix_sync";
    ::emu::wmma::check(line.n, what, p, ldm);
    ::emu::wmma::meet(line.n, what, p, ldm, layout == mem_col_major);
    const ::emu::frag::RowCol* cell = ::emu::wmma::cells<accumulator>(::emu::wmma::lane());
    for (int i = 0; i < 8; ++i)
        p[layout == mem_col_major ? cell[i].col * ldm + cell[i].row : cell[i].row * ldm + cell[i].col] = a.x[i];
}

// satf: an infinite result becomes the largest finite float of its sign, a NaN becomes +0.
template <class T, class LA, class LB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float>& d, const fragment<matrix_a, 16, 16, 16, T, LA>& a,
                     const fragment<matrix_b, 16, 16, 16, T, LB>& b, const fragment<accumulator, 16, 16, 16, float>& c,
                     bool satf = false, ::emu::tensor::Line line = {__builtin_LINE()}) {
    ::emu::wmma::MmaIn in;
    for (int i = 0; i < 8; ++i) {
        in.a[i] = ::emu_math::to_bits(a.x[i]);
        in.b[i] = ::emu_math::to_bits(b.x[i]);
        in.c[i] = c.x[i];
    }
    float res[8];
    emu_warp_exchange(line.n, "wmma::mma_sync", ::emu::tensor::kFullWarp, &in, res,
                      &::emu::wmma::mma_combine<std::is_same_v<T, __nv_bfloat16>>, nullptr);
    for (int i = 0; i < 8; ++i) {
        float v = res[i];
        if (satf) v = v != v ? 0.0f : (v > FLT_MAX ? FLT_MAX : (v < -FLT_MAX ? -FLT_MAX : v));
        d.x[i] = v;
    }
}

}  // namespace wmma
}  // namespace nvcuda

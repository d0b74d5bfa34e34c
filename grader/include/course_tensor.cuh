// course_tensor.cuh: the tensor cores, one warp at a time: mma.sync and ldmatrix.
//
// All 32 lanes of the warp must call each of these together (same call, no lane returned early):
// the hardware combines the registers of the whole warp. A 32-bit `unsigned` register holds two
// 16-bit values (half or bfloat16 bits), the lower 16 bits being the element of lower column index
// (for B: lower row index). With g = lane / 4 and t = lane % 4, as in the PTX ISA:
//
//   mma_m16n8k16_f16(d, a, b, c)   D (16x8, float) = A (16x16, half) * B (16x8, half) + C (16x8, float)
//     a[0]: A[g][2t, 2t+1]       a[1]: A[g+8][2t, 2t+1]
//     a[2]: A[g][2t+8, 2t+9]     a[3]: A[g+8][2t+8, 2t+9]
//     b[0]: B[2t, 2t+1][g]       b[1]: B[2t+8, 2t+9][g]      (two rows of one column of B)
//     c[0], c[1]: C[g][2t], C[g][2t+1]     c[2], c[3]: C[g+8][2t], C[g+8][2t+1]   (d alike)
//   mma_m16n8k8_f16(d, a, b, c)    the same with K = 8: a[0]: A[g][2t, 2t+1], a[1]: A[g+8][2t, 2t+1],
//                                  b[0]: B[2t, 2t+1][g]; c and d as above.
//   mma_m16n8k16_bf16, mma_m16n8k8_bf16: the same with bfloat16 A and B.
//   d may be the same array as c (accumulate in place). The products are exact, the sum is fp32.
//
//   ldmatrix_x4(r, row)  loads four 8x8 matrices of 16-bit values from shared memory. Every lane
//     passes the address of one row (8 values, 16 bytes, 16-byte aligned): lanes 0-7 the rows of
//     matrix 0, lanes 8-15 of matrix 1, 16-23 of matrix 2, 24-31 of matrix 3. Rows need not be
//     contiguous. Lane L receives in r[m] row L/4, columns 2(L%4) and 2(L%4)+1, of matrix m:
//     exactly the layout of an mma A fragment when the four matrices are A's quadrants in the
//     order top-left, bottom-left, top-right, bottom-right.
//   ldmatrix_x2(r, row), ldmatrix_x1(r, row): two or one matrices; only lanes 0-15 (0-7) give
//     addresses, but every lane must call it and receives its registers.
//   ldmatrix_x4_trans, _x2_trans, _x1_trans: each matrix transposed on the way: lane L receives
//     column L/4 of rows 2(L%4) and 2(L%4)+1.
//   For mma's B operand: if B (K x N) is stored row-major, each address a row k (8 consecutive n),
//   use the _trans form; if it is stored as N x K (each address a row n, 8 consecutive k, such as
//   K itself when computing Q K^T), use the plain form.
//
// On the CPU emulator (__CUDA_EMULATOR__) the same functions run in emu_tensor.hpp: exact
// products, one rounding, and a report naming the line when a lane is missing or an ldmatrix
// address is misaligned or not in shared memory.
#pragma once

#ifdef __CUDA_EMULATOR__
#include "emu_tensor.hpp"

#define EMU_TENSOR_FN inline __attribute__((always_inline))
EMU_TENSOR_FN void mma_m16n8k16_f16(float d[4], const unsigned a[4], const unsigned b[2], const float c[4],
                                    emu::tensor::Line line = {__builtin_LINE()}) {
    emu::tensor::mma<16, false>(line.n, "mma_m16n8k16_f16", d, a, b, c);
}
EMU_TENSOR_FN void mma_m16n8k16_bf16(float d[4], const unsigned a[4], const unsigned b[2], const float c[4],
                                     emu::tensor::Line line = {__builtin_LINE()}) {
    emu::tensor::mma<16, true>(line.n, "mma_m16n8k16_bf16", d, a, b, c);
}
EMU_TENSOR_FN void mma_m16n8k8_f16(float d[4], const unsigned a[2], const unsigned b[1], const float c[4],
                                   emu::tensor::Line line = {__builtin_LINE()}) {
    emu::tensor::mma<8, false>(line.n, "mma_m16n8k8_f16", d, a, b, c);
}
EMU_TENSOR_FN void mma_m16n8k8_bf16(float d[4], const unsigned a[2], const unsigned b[1], const float c[4],
                                    emu::tensor::Line line = {__builtin_LINE()}) {
    emu::tensor::mma<8, true>(line.n, "mma_m16n8k8_bf16", d, a, b, c);
}

#define EMU_LDMATRIX(name, count, trans)                                                              \
    EMU_TENSOR_FN void name(unsigned r[count], const void* row, emu::tensor::Line line = {__builtin_LINE()}) { \
        emu::tensor::ldmatrix<count, trans>(line.n, #name, r, row);                                       \
    }
EMU_LDMATRIX(ldmatrix_x1, 1, false)
EMU_LDMATRIX(ldmatrix_x2, 2, false)
EMU_LDMATRIX(ldmatrix_x4, 4, false)
EMU_LDMATRIX(ldmatrix_x1_trans, 1, true)
EMU_LDMATRIX(ldmatrix_x2_trans, 2, true)
EMU_LDMATRIX(ldmatrix_x4_trans, 4, true)
#undef EMU_LDMATRIX
#undef EMU_TENSOR_FN

#else  // a GPU: the PTX instructions themselves (sm_80 and later)

#define COURSE_MMA_16816(name, type)                                                                    \
    __device__ __forceinline__ void name(float d[4], const unsigned a[4], const unsigned b[2], const float c[4]) { \
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." type "." type ".f32 "                     \
                     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};"              \
                     : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])                                   \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),                \
                       "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));                                     \
    }
#define COURSE_MMA_1688(name, type)                                                                     \
    __device__ __forceinline__ void name(float d[4], const unsigned a[2], const unsigned b[1], const float c[4]) { \
        asm volatile("mma.sync.aligned.m16n8k8.row.col.f32." type "." type ".f32 "                      \
                     "{%0, %1, %2, %3}, {%4, %5}, {%6}, {%7, %8, %9, %10};"                             \
                     : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])                                   \
                     : "r"(a[0]), "r"(a[1]), "r"(b[0]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));   \
    }
COURSE_MMA_16816(mma_m16n8k16_f16, "f16")
COURSE_MMA_16816(mma_m16n8k16_bf16, "bf16")
COURSE_MMA_1688(mma_m16n8k8_f16, "f16")
COURSE_MMA_1688(mma_m16n8k8_bf16, "bf16")
#undef COURSE_MMA_16816
#undef COURSE_MMA_1688

// ldmatrix takes a shared-state-space address; "memory" keeps the compiler from moving the
// instruction across this thread's own stores to shared memory.
#define COURSE_SMEM(row) static_cast<unsigned>(__cvta_generic_to_shared(row))
__device__ __forceinline__ void ldmatrix_x1(unsigned r[1], const void* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];" : "=r"(r[0]) : "r"(COURSE_SMEM(row)) : "memory");
}
__device__ __forceinline__ void ldmatrix_x2(unsigned r[2], const void* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(COURSE_SMEM(row)) : "memory");
}
__device__ __forceinline__ void ldmatrix_x4(unsigned r[4], const void* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(COURSE_SMEM(row)) : "memory");
}
__device__ __forceinline__ void ldmatrix_x1_trans(unsigned r[1], const void* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];" : "=r"(r[0]) : "r"(COURSE_SMEM(row)) : "memory");
}
__device__ __forceinline__ void ldmatrix_x2_trans(unsigned r[2], const void* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(COURSE_SMEM(row)) : "memory");
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned r[4], const void* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(COURSE_SMEM(row)) : "memory");
}
#undef COURSE_SMEM

#endif

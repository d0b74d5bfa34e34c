// C = A * B + C0 with WMMA, 16x16x16 fragments: A is M x K, B is K x N (half or bfloat16), C0
// and C are M x N floats, each with its own leading dimension. a_col / b_col / c_col say whether
// the matrix is stored column-major. Block = 4 warps; warp w computes tile (w / 2, w % 2) of a
// 32 x 32 block tile. A comes straight from global memory, B through shared memory.
#include <mma.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
using namespace nvcuda;

template <class T, class LA, class LB>
__device__ void tile_mma(const T* A, const T* B, const float* C0, float* C, int K, int lda, int ldb, int ldc,
                         bool a_col, bool b_col, bool c_col) {
    __shared__ __align__(32) T Bs[4][16 * 16];  // one 16x16 B tile per warp, ldm 16
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int tm = blockIdx.y * 32 + warp / 2 * 16, tn = blockIdx.x * 32 + warp % 2 * 16;
    const wmma::layout_t cl = c_col ? wmma::mem_col_major : wmma::mem_row_major;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, LA> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, LB> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::load_matrix_sync(acc, C0 + (c_col ? tn * ldc + tm : tm * ldc + tn), ldc, cl);
    for (int k = 0; k < K; k += 16) {
        wmma::load_matrix_sync(fa, A + (a_col ? k * lda + tm : tm * lda + k), lda);
        // Copy B's tile to shared in the same layout (row-major: [k][n]; col-major: [n][k]).
        for (int i = lane; i < 256; i += 32) {
            const int outer = i / 16, inner = i % 16;
            Bs[warp][i] = b_col ? B[(tn + outer) * ldb + k + inner] : B[(k + outer) * ldb + tn + inner];
        }
        __syncwarp();
        wmma::load_matrix_sync(fb, Bs[warp], 16);
        wmma::mma_sync(acc, fa, fb, acc);
        __syncwarp();
    }
    wmma::store_matrix_sync(C + (c_col ? tn * ldc + tm : tm * ldc + tn), acc, ldc, cl);
}

template <class T>
__device__ void dispatch(const T* A, const T* B, const float* C0, float* C, int K, int lda, int ldb, int ldc,
                         int a_col, int b_col, int c_col) {
    if (!a_col && !b_col) tile_mma<T, wmma::row_major, wmma::row_major>(A, B, C0, C, K, lda, ldb, ldc, a_col, b_col, c_col);
    if (!a_col && b_col) tile_mma<T, wmma::row_major, wmma::col_major>(A, B, C0, C, K, lda, ldb, ldc, a_col, b_col, c_col);
    if (a_col && !b_col) tile_mma<T, wmma::col_major, wmma::row_major>(A, B, C0, C, K, lda, ldb, ldc, a_col, b_col, c_col);
    if (a_col && b_col) tile_mma<T, wmma::col_major, wmma::col_major>(A, B, C0, C, K, lda, ldb, ldc, a_col, b_col, c_col);
}

extern "C" __global__ void wmma_f16(const __half* A, const __half* B, const float* C0, float* C, int K, int lda,
                                    int ldb, int ldc, int a_col, int b_col, int c_col) {
    dispatch(A, B, C0, C, K, lda, ldb, ldc, a_col, b_col, c_col);
}

extern "C" __global__ void wmma_bf16(const __nv_bfloat16* A, const __nv_bfloat16* B, const float* C0, float* C, int K,
                                     int lda, int ldb, int ldc, int a_col, int b_col, int c_col) {
    dispatch(A, B, C0, C, K, lda, ldb, ldc, a_col, b_col, c_col);
}

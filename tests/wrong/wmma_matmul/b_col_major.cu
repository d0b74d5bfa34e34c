// expect: B read as column-major
// Mistake: matrix_b declared col_major for a row-major B: every 16 x 16 tile of B is used transposed.
#include <mma.h>
#include <cuda_fp16.h>
using namespace nvcuda;

extern "C" __global__ void wmma_matmul(const __half* A, const __half* B, float* C, int M, int N, int K) {
    // C = A B with A (M x K) and B (K x N) half, row-major, C float; M, N, K multiples of 16.
    // A block of 4 warps covers a 32 x 32 tile of C: warp w owns the 16 x 16 tile (w / 2, w % 2).
    const int warp = threadIdx.x / 32;
    const int row = blockIdx.y * 32 + warp / 2 * 16, col = blockIdx.x * 32 + warp % 2 * 16;
    // WMMA calls need all 32 lanes: a warp whose tile lies past the edge leaves as a whole.
    if (row >= M || col >= N) return;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k = 0; k < K; k += 16) {
        wmma::load_matrix_sync(a, A + (size_t)row * K + k, K);  // leading dimension: a row of A is K long
        wmma::load_matrix_sync(b, B + (size_t)k * N + col, N);
        wmma::mma_sync(acc, a, b, acc);
    }
    wmma::store_matrix_sync(C + (size_t)row * N + col, acc, N, wmma::mem_row_major);
}

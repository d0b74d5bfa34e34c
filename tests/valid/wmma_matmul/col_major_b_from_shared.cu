// B's fragment declared col_major: each warp copies its 16 x 16 tile of B transposed into its own
// shared buffer (Bt[n][k]), where element (k, n) sits at k + 16 n, exactly what a col_major fragment
// with leading dimension 16 reads; the same products as a row_major fragment on B itself. The warp
// synchronises only itself (__syncwarp) around the buffer, and accumulates even and odd K steps in two
// fragments, added element by element at the end (both share one layout).
#include <mma.h>
#include <cuda_fp16.h>
using namespace nvcuda;

extern "C" __global__ void wmma_matmul(const __half* A, const __half* B, float* C, int M, int N, int K) {
    __shared__ __align__(32) __half Bt[4][16 * 16];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int tile_row = blockIdx.y * 32 + (warp >> 1) * 16;
    const int tile_col = blockIdx.x * 32 + (warp & 1) * 16;
    if (tile_row >= M || tile_col >= N) return;  // the whole warp leaves together
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> even, odd;
    wmma::fill_fragment(even, 0.0f);
    wmma::fill_fragment(odd, 0.0f);
    __half* bt = Bt[warp];
    for (int k = 0, step = 0; k < K; k += 16, ++step) {
        for (int e = lane; e < 256; e += 32) {  // e = 16 kr + n: row kr of the tile, read along n
            const int kr = e >> 4, n = e & 15;
            bt[n * 16 + kr] = B[(size_t)(k + kr) * N + tile_col + n];
        }
        __syncwarp();
        wmma::load_matrix_sync(a, A + (size_t)tile_row * K + k, K);
        wmma::load_matrix_sync(b, bt, 16);
        if (step & 1) wmma::mma_sync(odd, a, b, odd);
        else wmma::mma_sync(even, a, b, even);
        __syncwarp();  // every lane has its fragment before the next tile overwrites the buffer
    }
    for (int i = 0; i < even.num_elements; ++i) even.x[i] += odd.x[i];
    wmma::store_matrix_sync(C + (size_t)tile_row * N + tile_col, even, N, wmma::mem_row_major);
}

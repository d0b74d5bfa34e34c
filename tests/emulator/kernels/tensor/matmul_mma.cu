// C = A * B with ldmatrix and mma.sync: A is M x K and B is K x N, row-major half; C is M x N
// float. M, N, K multiples of 64. Block (128 threads, 4 warps) computes a 64 x 64 tile of C; warp w
// owns rows 16w .. 16w + 15 of it, as eight 16 x 8 accumulators.
#include <cuda_fp16.h>

#define TILE 64
#define PAD 8  // row stride 72 halves = 144 bytes: rows stay 16-byte aligned

extern "C" __global__ void matmul_mma(const __half* A, const __half* B, float* C, int M, int N, int K) {
    __shared__ __align__(16) __half As[TILE][TILE + PAD];
    __shared__ __align__(16) __half Bs[TILE][TILE + PAD];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int row0 = blockIdx.y * TILE, col0 = blockIdx.x * TILE;
    float acc[8][4] = {};
    for (int k0 = 0; k0 < K; k0 += TILE) {
        for (int i = threadIdx.x; i < TILE * TILE; i += blockDim.x) {
            const int r = i / TILE, c = i % TILE;
            As[r][c] = A[(row0 + r) * K + k0 + c];
            Bs[r][c] = B[(k0 + r) * N + col0 + c];
        }
        __syncthreads();
        for (int kk = 0; kk < TILE; kk += 16) {
            // A's four 8x8 quadrants: lanes 0-15 address rows 0-15 at column kk, lanes 16-31
            // the same rows at column kk + 8.
            unsigned a[4];
            ldmatrix_x4(a, &As[warp * 16 + lane % 16][kk + lane / 16 * 8]);
            for (int n = 0; n < TILE; n += 16) {
                // B is stored k-major: .trans gives the column fragments; registers 0-1 for
                // columns n .. n+7, registers 2-3 for n+8 .. n+15.
                unsigned b[4];
                ldmatrix_x4_trans(b, &Bs[kk + lane % 16][n + lane / 16 * 8]);
                mma_m16n8k16_f16(acc[n / 8], a, b, acc[n / 8]);
                mma_m16n8k16_f16(acc[n / 8 + 1], a, b + 2, acc[n / 8 + 1]);
            }
        }
        __syncthreads();
    }
    const int g = lane / 4, t = lane % 4;
    for (int j = 0; j < 8; ++j)
        for (int i = 0; i < 4; ++i)
            C[(row0 + warp * 16 + g + (i / 2) * 8) * N + col0 + j * 8 + 2 * t + i % 2] = acc[j][i];
}

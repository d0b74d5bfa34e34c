// expect: threads race on memory
// Mistake: no barrier after the products: a fast warp overwrites the A and B tiles others still read.
#include <cuda_fp16.h>
#define BM 64        // rows of C per block: 4 warps x 16 rows
#define BN 64        // columns of C per block: 8 mma tiles of 8 columns per warp
#define BK 32        // depth of the A and B tiles staged in shared memory
#define AS (BK + 8)  // row strides in halves: 16 bytes of padding keep ldmatrix rows on distinct banks
#define BS (BN + 8)

extern "C" __global__ void mma_matmul(const __half* A, const __half* B, float* C, int M, int N, int K) {
    // C = A B (A: M x K, B: K x N, half, row-major; C float), any M, N, K. The block stages a
    // 64 x 32 tile of A and a 32 x 64 tile of B; warp w computes rows 16w..16w+15 of the block's
    // 64 x 64 tile of C with mma.m16n8k16, fed by ldmatrix.
    __shared__ __align__(16) __half As[BM * AS];
    __shared__ __align__(16) __half Bs[BK * BS];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    float acc[BN / 8][4] = {};  // eight 16 x 8 C fragments
    for (int k0 = 0; k0 < K; k0 += BK) {
        // Zero-fill past the edges: a zero row or column adds nothing to the products.
        for (int i = threadIdx.x; i < BM * BK; i += blockDim.x) {
            const int r = i / BK, c = i % BK;
            As[r * AS + c] = (m0 + r < M && k0 + c < K) ? A[(size_t)(m0 + r) * K + k0 + c] : __float2half(0.0f);
        }
        for (int i = threadIdx.x; i < BK * BN; i += blockDim.x) {
            const int r = i / BN, c = i % BN;
            Bs[r * BS + c] = (k0 + r < K && n0 + c < N) ? B[(size_t)(k0 + r) * N + n0 + c] : __float2half(0.0f);
        }
        __syncthreads();
        for (int kk = 0; kk < BK; kk += 16) {
            // A fragment: lanes 0-15 give rows 0-15 at column kk, lanes 16-31 the same rows at kk + 8.
            unsigned a[4];
            ldmatrix_x4(a, As + (warp * 16 + lane % 16) * AS + kk + lane / 16 * 8);
            for (int n = 0; n < BN / 8; n += 2) {
                // B is stored k-major (a row holds 8 consecutive n): .trans turns each 8 x 8
                // matrix so a lane gets two consecutive k of one column n, as mma wants.
                unsigned b[4];
                ldmatrix_x4_trans(b, Bs + (kk + lane % 16) * BS + n * 8 + lane / 16 * 8);
                mma_m16n8k16_f16(acc[n], a, b, acc[n]);
                mma_m16n8k16_f16(acc[n + 1], a, b + 2, acc[n + 1]);
            }
        }
    }
    for (int n = 0; n < BN / 8; ++n)
        for (int i = 0; i < 4; ++i) {
            const int row = m0 + warp * 16 + g + 8 * (i / 2), col = n0 + n * 8 + 2 * t + i % 2;
            if (row < M && col < N) C[(size_t)row * N + col] = acc[n][i];
        }
}

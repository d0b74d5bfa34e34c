// expect: C fragment stored to the wrong rows
// Mistake: the four accumulator floats of a lane taken as a 2 x 2 block: rows 2g and 2g + 1.
#include <cuda_fp16.h>
#ifndef HEAD_DIM
#define HEAD_DIM 64
#endif
#define TILE 64                 // query rows per block, and keys per K tile
#define STRIDE (HEAD_DIM + 8)   // shared row stride in halves (16 bytes of padding)

extern "C" __global__ void qk_scores_mma(const __half* Q, const __half* K, float* S, int N, float scale) {
    // S = scale * Q K^T for the 64 query rows of block blockIdx.x, all N keys. Warp w owns query
    // rows 16w..16w+15: its Q fragments stay in registers while the block walks over K in tiles
    // of 64 keys staged in shared memory.
    __shared__ __align__(16) __half Qs[TILE * STRIDE];
    __shared__ __align__(16) __half Ks[TILE * STRIDE];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    const int q0 = blockIdx.x * TILE;
    for (int i = threadIdx.x; i < TILE * HEAD_DIM; i += blockDim.x) {
        const int r = i / HEAD_DIM, c = i % HEAD_DIM;
        Qs[r * STRIDE + c] = q0 + r < N ? Q[(size_t)(q0 + r) * HEAD_DIM + c] : __float2half(0.0f);
    }
    __syncthreads();
    unsigned qf[HEAD_DIM / 16][4];  // the warp's 16 x HEAD_DIM slice of Q as A fragments
    for (int kk = 0; kk < HEAD_DIM / 16; ++kk)
        ldmatrix_x4(qf[kk], Qs + (warp * 16 + lane % 16) * STRIDE + kk * 16 + lane / 16 * 8);

    for (int k0 = 0; k0 < N; k0 += TILE) {
        __syncthreads();  // every warp is done with the previous K tile
        for (int i = threadIdx.x; i < TILE * HEAD_DIM; i += blockDim.x) {
            const int r = i / HEAD_DIM, c = i % HEAD_DIM;
            Ks[r * STRIDE + c] = k0 + r < N ? K[(size_t)(k0 + r) * HEAD_DIM + c] : __float2half(0.0f);
        }
        __syncthreads();
        float s[TILE / 8][4] = {};
        for (int kk = 0; kk < HEAD_DIM / 16; ++kk)
            for (int n = 0; n < TILE / 8; n += 2) {
                // B = K^T is the "col" operand: column n of B is row n of K, and a row of K holds
                // consecutive k. So the plain ldmatrix already gives B; matrix m = lane / 8 is
                // keys n*8 + (m / 2)*8 .. +7 at dimensions kk*16 + (m % 2)*8 .. +7.
                unsigned b[4];
                const int m = lane / 8;
                ldmatrix_x4(b, Ks + (n * 8 + m / 2 * 8 + lane % 8) * STRIDE + kk * 16 + m % 2 * 8);
                mma_m16n8k16_f16(s[n], qf[kk], b, s[n]);
                mma_m16n8k16_f16(s[n + 1], qf[kk], b + 2, s[n + 1]);
            }
        for (int n = 0; n < TILE / 8; ++n)
            for (int i = 0; i < 4; ++i) {
                const int row = q0 + warp * 16 + 2 * g + i / 2, key = k0 + n * 8 + 2 * t + i % 2;
                if (row < N && key < N) S[(size_t)row * N + key] = scale * s[n][i];
            }
    }
}

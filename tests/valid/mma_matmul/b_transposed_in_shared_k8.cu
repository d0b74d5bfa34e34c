// B staged transposed in shared memory (Bt[n][k], each row 8 consecutive k per 16 bytes), so its
// fragment comes from the plain ldmatrix_x2 (no .trans), one 8-column tile at a time; each k16 step is
// done as two mma_m16n8k8_f16 (A registers {a0, a1} then {a2, a3}, B registers b0 then b1); the A
// addresses are written per 8 x 8 matrix (matrix = lane / 8: rows +8 for matrices 1 and 3, columns +8
// for 2 and 3). The same products, summed in float in another order.
#include <cuda_fp16.h>
#define BM 64
#define BN 64
#define BK 32
#define LDS (BK + 8)  // both tiles are stored with rows along k, padded by 8 halves

extern "C" __global__ void mma_matmul(const __half* A, const __half* B, float* C, int M, int N, int K) {
    __shared__ __align__(16) __half As[BM][LDS];
    __shared__ __align__(16) __half Bt[BN][LDS];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const __half zero = __float2half(0.0f);
    float c[BN / 8][4];
    for (int nt = 0; nt < BN / 8; ++nt)
        for (int i = 0; i < 4; ++i) c[nt][i] = 0.0f;

    const int mat = lane / 8, r8 = lane % 8;
    const int a_row = warp * 16 + (mat & 1) * 8 + r8, a_col = (mat >> 1) * 8;
    const int b_row = r8, b_col = (mat & 1) * 8;  // x2: lanes 0-7 matrix 0, lanes 8-15 matrix 1
    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int e = threadIdx.x; e < BM * BK; e += blockDim.x) {
            const int r = e / BK, k = e % BK;
            As[r][k] = row0 + r < M && k0 + k < K ? A[(size_t)(row0 + r) * K + k0 + k] : zero;
        }
        for (int e = threadIdx.x; e < BK * BN; e += blockDim.x) {
            const int k = e / BN, n = e % BN;  // read B along its rows, write Bt down a column
            Bt[n][k] = k0 + k < K && col0 + n < N ? B[(size_t)(k0 + k) * N + col0 + n] : zero;
        }
        __syncthreads();
        for (int kk = 0; kk < BK; kk += 16) {
            unsigned a[4];
            ldmatrix_x4(a, &As[a_row][kk + a_col]);
            for (int nt = 0; nt < BN / 8; ++nt) {
                unsigned b[2];
                ldmatrix_x2(b, &Bt[nt * 8 + b_row][kk + b_col]);
                mma_m16n8k8_f16(c[nt], a, b, c[nt]);          // k = kk .. kk + 7
                mma_m16n8k8_f16(c[nt], a + 2, b + 1, c[nt]);  // k = kk + 8 .. kk + 15
            }
        }
        __syncthreads();
    }
    const int g = lane >> 2, t = lane & 3;
    for (int nt = 0; nt < BN / 8; ++nt) {
        const int col = col0 + nt * 8 + 2 * t;
        for (int half = 0; half < 2; ++half) {
            const int row = row0 + warp * 16 + g + 8 * half;
            if (row >= M) continue;
            if (col < N) C[(size_t)row * N + col] = c[nt][2 * half];
            if (col + 1 < N) C[(size_t)row * N + col + 1] = c[nt][2 * half + 1];
        }
    }
}

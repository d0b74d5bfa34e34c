// Two passes over each query tile: first P_ij and dS_ij for every row of the tile (kept in local
// arrays, 0 for rows past N), then dV and dK accumulated with fmaf with the column loop outside and
// the row loop inside (the solution nests them the other way). The softmax scale is folded into dS
// as it is formed, so dK needs no final multiply, and the tile is zero-filled past N.
#define ROWS 64
#define TILE 32
#define MAXD 128

extern "C" __global__ void flash_bwd_dkdv(const float* Q, const float* K, const float* V, const float* dO,
                                          const float* L, const float* D, float* dK, float* dV, int N, int d,
                                          float scale) {
    __shared__ float Qs[TILE][MAXD], dOs[TILE][MAXD], Ls[TILE], Ds[TILE];
    const size_t row_base = ((size_t)blockIdx.z * gridDim.y + blockIdx.y) * N;
    const int j = blockIdx.x * ROWS + threadIdx.x;
    const bool mine = j < N;
    float kj[MAXD], vj[MAXD], dk[MAXD], dv[MAXD];
    for (int c = 0; c < d; ++c) {
        kj[c] = mine ? K[(row_base + j) * d + c] : 0.0f;
        vj[c] = mine ? V[(row_base + j) * d + c] : 0.0f;
        dk[c] = dv[c] = 0.0f;
    }
    for (int q0 = 0; q0 < N; q0 += TILE) {
        for (int e = threadIdx.x; e < TILE * d; e += ROWS) {
            const int r = e / d, c = e % d;
            const bool in = q0 + r < N;
            Qs[r][c] = in ? Q[(row_base + q0 + r) * d + c] : 0.0f;
            dOs[r][c] = in ? dO[(row_base + q0 + r) * d + c] : 0.0f;
        }
        if (threadIdx.x < TILE) {
            const bool in = q0 + threadIdx.x < N;
            Ls[threadIdx.x] = in ? L[row_base + q0 + threadIdx.x] : 0.0f;
            Ds[threadIdx.x] = in ? D[row_base + q0 + threadIdx.x] : 0.0f;
        }
        __syncthreads();
        if (mine) {
            float p[TILE], ds[TILE];
            for (int r = 0; r < TILE; ++r) {
                float s = 0.0f, dp = 0.0f;
                for (int c = 0; c < d; ++c) {
                    s = fmaf(Qs[r][c], kj[c], s);
                    dp = fmaf(dOs[r][c], vj[c], dp);
                }
                p[r] = q0 + r < N ? expf(fmaf(scale, s, -Ls[r])) : 0.0f;
                ds[r] = scale * p[r] * (dp - Ds[r]);
            }
            for (int c = 0; c < d; ++c) {
                float v_acc = dv[c], k_acc = dk[c];
                for (int r = 0; r < TILE; ++r) {
                    v_acc = fmaf(p[r], dOs[r][c], v_acc);
                    k_acc = fmaf(ds[r], Qs[r][c], k_acc);
                }
                dv[c] = v_acc;
                dk[c] = k_acc;
            }
        }
        __syncthreads();
    }
    if (mine)
        for (int c = 0; c < d; ++c) {
            dK[(row_base + j) * d + c] = dk[c];
            dV[(row_base + j) * d + c] = dv[c];
        }
}

// Causal dK/dV with the walk over query tiles counted in tiles: it starts at tile
// blockIdx.x * (ROWS / TILE), the one that holds the block's first key (every earlier query row is
// below it, so sees none of the block's keys), and runs while t * TILE < N. Inside a tile the mask is
// a loop bound, not a test per row: key j's rows start at max(j - q0, 0). P comes from exp2f with
// log2 e applied to (scale * s - L) once, and the scale is applied to dK at the end.
#define ROWS 64
#define TILE 32
#define MAXD 128

extern "C" __global__ void flash_bwd_dkdv_causal(const float* Q, const float* K, const float* V, const float* dO,
                                                 const float* L, const float* D, float* dK, float* dV, int N, int d,
                                                 float scale) {
    __shared__ float Qs[TILE][MAXD], dOs[TILE][MAXD], Ls[TILE], Ds[TILE];
    const size_t head = (size_t)blockIdx.z * gridDim.y + blockIdx.y;
    const float *Qh = Q + head * N * d, *dOh = dO + head * N * d, *Lh = L + head * N, *Dh = D + head * N;
    const int j = blockIdx.x * ROWS + threadIdx.x;
    const bool mine = j < N;
    float kj[MAXD], vj[MAXD], dk[MAXD], dv[MAXD];
    for (int c = 0; c < d; ++c) {
        kj[c] = mine ? K[(head * N + j) * d + c] : 0.0f;
        vj[c] = mine ? V[(head * N + j) * d + c] : 0.0f;
        dk[c] = 0.0f;
        dv[c] = 0.0f;
    }
    for (int t = blockIdx.x * (ROWS / TILE); t * TILE < N; ++t) {
        const int q0 = t * TILE, rows = min(TILE, N - q0);
        for (int e = threadIdx.x; e < rows * d; e += blockDim.x) {
            const int r = e / d, c = e % d;
            Qs[r][c] = Qh[(size_t)(q0 + r) * d + c];
            dOs[r][c] = dOh[(size_t)(q0 + r) * d + c];
        }
        if (threadIdx.x < rows) {
            Ls[threadIdx.x] = Lh[q0 + threadIdx.x];
            Ds[threadIdx.x] = Dh[q0 + threadIdx.x];
        }
        __syncthreads();
        const int first = mine ? max(j - q0, 0) : rows;  // rows q0 + r < j do not see key j
        for (int r = first; r < rows; ++r) {
            float s = 0.0f, dp = 0.0f;
            for (int c = 0; c < d; ++c) s += Qs[r][c] * kj[c];
            for (int c = 0; c < d; ++c) dp += dOs[r][c] * vj[c];
            const float p = exp2f((scale * s - Ls[r]) * 1.4426950408889634f);
            const float ds = p * (dp - Ds[r]);
            for (int c = 0; c < d; ++c) {
                dv[c] += p * dOs[r][c];
                dk[c] += ds * Qs[r][c];
            }
        }
        __syncthreads();
    }
    if (mine)
        for (int c = 0; c < d; ++c) {
            dK[(head * N + j) * d + c] = dk[c] * scale;
            dV[(head * N + j) * d + c] = dv[c];
        }
}

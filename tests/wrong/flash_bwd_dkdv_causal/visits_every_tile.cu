// expect: the Q and dO bytes that loading each needed tile once
#define ROWS 64     // key rows per block: one per thread
#define TILE 32     // query rows staged in shared memory per step
#define MAXD 128    // largest head dimension

extern "C" __global__ void flash_bwd_dkdv_causal(const float* Q, const float* K, const float* V, const float* dO,
                                                 const float* L, const float* D, float* dK, float* dV,
                                                 int N, int d, float scale) {
    __shared__ float Qs[TILE][MAXD], dOs[TILE][MAXD];   // one query tile: 2 * 32 * 128 * 4 B = 32 KiB
    __shared__ float Ls[TILE], Ds[TILE];
    size_t head = (size_t)blockIdx.z * gridDim.y + blockIdx.y;   // (batch, head) -> which [N, d] slice
    const float* Qh = Q + head * N * d;                          // this head's Q, dO, L and D
    const float* dOh = dO + head * N * d;
    const float* Lh = L + head * N;
    const float* Dh = D + head * N;
    int j = blockIdx.x * ROWS + threadIdx.x;                     // this thread's key row
    bool active = j < N;                                         // no early return: every thread must reach the barriers
    float k_j[MAXD], v_j[MAXD], dk[MAXD], dv[MAXD];              // this thread's K_j, V_j and its dK_j, dV_j sums
    // BEGIN SOLUTION
    for (int c = 0; c < d; ++c) {
        k_j[c] = active ? K[head * N * d + (size_t)j * d + c] : 0.0f;
        v_j[c] = active ? V[head * N * d + (size_t)j * d + c] : 0.0f;
        dk[c] = 0.0f;
        dv[c] = 0.0f;
    }
    // Query i sees keys j <= i. Tiles whose rows all lie before this block's first key
    // (q0 + TILE <= first key) contribute nothing: start at the tile that holds that key.
    int first_key = blockIdx.x * ROWS;
    for (int q0 = 0; q0 < N; q0 += TILE) {
        int rows = min(TILE, N - q0);                            // the last tile may be partial
        for (int idx = threadIdx.x; idx < rows * d; idx += blockDim.x) {
            int r = idx / d, c = idx % d;
            Qs[r][c] = Qh[(size_t)(q0 + r) * d + c];
            dOs[r][c] = dOh[(size_t)(q0 + r) * d + c];
        }
        for (int r = threadIdx.x; r < rows; r += blockDim.x) {
            Ls[r] = Lh[q0 + r];
            Ds[r] = Dh[q0 + r];
        }
        __syncthreads();                                         // the tile is loaded
        if (active) {
            for (int r = 0; r < rows; ++r) {
                if (q0 + r < j) continue;                        // masked: P_ij = 0 (and so dS_ij = 0)
                float s = 0.0f, dp = 0.0f;
                for (int c = 0; c < d; ++c) {
                    s += Qs[r][c] * k_j[c];                        // S_ij / scale
                    dp += dOs[r][c] * v_j[c];                      // dP_ij = dO_i . V_j
                }
                float p = expf(scale * s - Ls[r]);               // P_ij, normalised by the saved L_i
                float ds = p * (dp - Ds[r]);                     // dS_ij = P_ij (dP_ij - D_i)
                for (int c = 0; c < d; ++c) {
                    dv[c] += p * dOs[r][c];                      // dV_j += P_ij dO_i
                    dk[c] += ds * Qs[r][c];                      // dK_j += dS_ij Q_i   (scale at the end)
                }
            }
        }
        __syncthreads();                                         // everyone is done before the next load
    }
    if (active) {
        for (int c = 0; c < d; ++c) {
            dK[head * N * d + (size_t)j * d + c] = scale * dk[c];
            dV[head * N * d + (size_t)j * d + c] = dv[c];
        }
    }
    // END SOLUTION
}
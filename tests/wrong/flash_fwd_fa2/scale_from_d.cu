// expect: scale computed from d instead of the scale argument
#ifndef BR
#define BR 16       // query rows per block (blockDim.y)
#endif
#ifndef BC
#define BC 16       // keys per K/V tile (blockDim.x); a power of two <= 32: the shuffle width
#endif

extern "C" __global__ void flash_fwd_fa2(const float* Q, const float* K, const float* V, float* O, float* L,
                                         int N, int d, float scale) {
    scale = rsqrtf((float)d);   // BUG: recomputes the scale instead of using the argument
    // FlashAttention-2 loop order: a block owns BR query rows (blockIdx.x) of head (blockIdx.z, blockIdx.y)
    // and loops over K/V tiles of BC keys. Thread (x, y) computes the score S[y][x]; the whole
    // state (O accumulator, m, l) stays on chip and O is written once, at the end.
    extern __shared__ float smem[];
    float* Qs = smem;                 // [BR][d]
    float* Os = Qs + BR * d;          // [BR][d]  unnormalised output accumulator
    float* Ks = Os + BR * d;          // [BC][d]
    float* Vs = Ks + BC * d;          // [BC][d]
    float* S  = Vs + BC * d;          // [BR][BC] probabilities of the current tile
    float* ms = S + BR * BC;          // [BR] running max
    float* ls = ms + BR;              // [BR] running sum
    int x = threadIdx.x, y = threadIdx.y, tid = y * BC + x;
    // BEGIN SOLUTION
    size_t head = (size_t)blockIdx.z * gridDim.y + blockIdx.y;
    const float* Qh = Q + head * N * d;
    const float* Kh = K + head * N * d;
    const float* Vh = V + head * N * d;
    int q0 = blockIdx.x * BR;
    int nq = min(BR, N - q0);                                    // rows of this block that exist

    // Load the Q tile once (zeros past N, so every row computes harmless finite numbers) and
    // start every row from the empty state.
    for (int i = tid; i < BR * d; i += BR * BC) {
        Qs[i] = (i < nq * d) ? Qh[(size_t)q0 * d + i] : 0.0f;
        Os[i] = 0.0f;
    }
    if (x == 0) { ms[y] = -INFINITY; ls[y] = 0.0f; }

    for (int start = 0; start < N; start += BC) {
        int nk = min(BC, N - start);
        __syncthreads();                                         // the previous tile is no longer read
        for (int i = tid; i < BC * d; i += BR * BC) {            // zero-fill past the last key
            bool real = i < nk * d;
            Ks[i] = real ? Kh[(size_t)start * d + i] : 0.0f;
            Vs[i] = real ? Vh[(size_t)start * d + i] : 0.0f;
        }
        __syncthreads();                                         // K/V tile (and Q, m, l at start) ready

        // One score per thread; a key past N must not enter the max or the sum.
        float s = -INFINITY;
        if (x < nk) {
            float dot = 0.0f;
            for (int c = 0; c < d; ++c) dot += Qs[y * d + c] * Ks[x * d + c];
            s = scale * dot;
        }
        // Row max over the BC threads of row y: they are BC consecutive lanes of one warp, so a
        // butterfly of shuffles with width BC stays inside the row.
        float m_tile = s;
        for (int off = BC / 2; off > 0; off >>= 1)
            m_tile = fmaxf(m_tile, __shfl_xor_sync(FULL_MASK, m_tile, off, BC));
        float m_old = ms[y];
        float m_new = fmaxf(m_old, m_tile);                      // finite: key x = 0 always exists
        float pij = expf(s - m_new);                             // exp(-inf) = 0 for missing keys
        float l_tile = pij;
        for (int off = BC / 2; off > 0; off >>= 1)
            l_tile += __shfl_xor_sync(FULL_MASK, l_tile, off, BC);
        float alpha = expf(m_old - m_new);                       // rescale of the old state
        S[y * BC + x] = pij;
        __syncthreads();                                         // S complete; everyone has read ms[y]

        // O[y][c] = alpha * O[y][c] + sum_j P[y][j] V[j][c]: thread x handles columns x, x + BC, ...
        for (int c = x; c < d; c += BC) {
            float o = alpha * Os[y * d + c];
            for (int j = 0; j < nk; ++j) o += S[y * BC + j] * Vs[j * d + c];
            Os[y * d + c] = o;
        }
        if (x == 0) { ms[y] = m_new; ls[y] = alpha * ls[y] + l_tile; }
    }
    __syncthreads();

    if (y < nq) {                                                // write O once, and L
        int row = q0 + y;
        float l = ls[y];
        for (int c = x; c < d; c += BC) O[(head * N + row) * d + c] = Os[y * d + c] / l;
        if (x == 0) L[head * N + row] = ms[y] + logf(l);
    }
    // END SOLUTION
}
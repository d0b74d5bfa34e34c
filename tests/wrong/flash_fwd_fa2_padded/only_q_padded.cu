// expect: wavefronts per shared load request
// Mistake: Q and O padded, K and V still read at a stride of d floats.
#ifndef BR
#define BR 16       // query rows per block (blockDim.y)
#endif
#ifndef BC
#define BC 16       // keys per K/V tile (blockDim.x); a power of two <= 32: the shuffle width
#endif

extern "C" __global__ void flash_fwd_fa2_padded(const float* Q, const float* K, const float* V, float* O, float* L,
                                                int N, int d, float scale) {
    // Module 04's flash_fwd_fa2 with its shared-memory rows padded to ld = d + 1 floats. In the
    // score loop the 16 lanes of a row read Ks at a stride of one row: with a stride of d floats
    // (a multiple of 32 banks) all 16 land in one bank; with an odd stride they land in 16 banks.
    extern __shared__ float smem[];
    int ld = d + 1;                   // padded row stride
    float* Qs = smem;                 // [BR][ld]
    float* Os = Qs + BR * ld;         // [BR][ld]  unnormalised output accumulator
    float* Ks = Os + BR * ld;         // [BC][d]
    float* Vs = Ks + BC * d;          // [BC][d]
    float* S  = Vs + BC * ld;         // [BR][BC] probabilities of the current tile
    float* ms = S + BR * BC;          // [BR] running max
    float* ls = ms + BR;              // [BR] running sum
    int x = threadIdx.x, y = threadIdx.y, tid = y * BC + x;
    size_t head = (size_t)blockIdx.z * gridDim.y + blockIdx.y;
    const float* Qh = Q + head * N * d;
    const float* Kh = K + head * N * d;
    const float* Vh = V + head * N * d;
    int q0 = blockIdx.x * BR;
    int nq = min(BR, N - q0);

    // Global memory is read as before (consecutive i, coalesced); only the shared address of
    // element i = r * d + c changes, to r * ld + c.
    for (int i = tid; i < BR * d; i += BR * BC) {
        int r = i / d, c = i - r * d;
        Qs[r * ld + c] = (r < nq) ? Qh[(size_t)q0 * d + i] : 0.0f;
        Os[r * ld + c] = 0.0f;
    }
    if (x == 0) { ms[y] = -INFINITY; ls[y] = 0.0f; }

    for (int start = 0; start < N; start += BC) {
        int nk = min(BC, N - start);
        __syncthreads();
        for (int i = tid; i < BC * d; i += BR * BC) {
            int r = i / d, c = i - r * d;
            bool real = r < nk;
            Ks[i] = real ? Kh[(size_t)start * d + i] : 0.0f;
            Vs[i] = real ? Vh[(size_t)start * d + i] : 0.0f;
        }
        __syncthreads();

        float s = -INFINITY;
        if (x < nk) {
            float dot = 0.0f;
            for (int c = 0; c < d; ++c) dot += Qs[y * ld + c] * Ks[x * d + c];
            s = scale * dot;
        }
        float m_tile = s;
        for (int off = BC / 2; off > 0; off >>= 1)
            m_tile = fmaxf(m_tile, __shfl_xor_sync(FULL_MASK, m_tile, off, BC));
        float m_old = ms[y];
        float m_new = fmaxf(m_old, m_tile);
        float pij = expf(s - m_new);
        float l_tile = pij;
        for (int off = BC / 2; off > 0; off >>= 1)
            l_tile += __shfl_xor_sync(FULL_MASK, l_tile, off, BC);
        float alpha = expf(m_old - m_new);
        S[y * BC + x] = pij;
        __syncthreads();

        for (int c = x; c < d; c += BC) {
            float o = alpha * Os[y * ld + c];
            for (int j = 0; j < nk; ++j) o += S[y * BC + j] * Vs[j * d + c];
            Os[y * ld + c] = o;
        }
        if (x == 0) { ms[y] = m_new; ls[y] = alpha * ls[y] + l_tile; }
    }
    __syncthreads();

    if (y < nq) {
        int row = q0 + y;
        float l = ls[y];
        for (int c = x; c < d; c += BC) O[(head * N + row) * d + c] = Os[y * ld + c] / l;
        if (x == 0) L[head * N + row] = ms[y] + logf(l);
    }
}

// expect: rescaled with the tile's max instead of the running max
#define ROWS 64     // query rows per block: one thread per row
#define BC 32       // keys per K/V tile in shared memory
#define DMAX 128    // largest head dimension: sizes the per-thread arrays

extern "C" __global__ void flash_fwd_row(const float* Q, const float* K, const float* V, float* O, float* L,
                                         int N, int d, float scale) {
    // Thread t owns query row blockIdx.x * ROWS + t of head (blockIdx.z, blockIdx.y).
    // The block stages tiles of BC keys of K and V in shared memory; every thread then runs
    // the online softmax for its row over the tile, keeping (m, l, acc) in registers.
    __shared__ float Ks[BC * DMAX];
    __shared__ float Vs[BC * DMAX];
    // BEGIN SOLUTION
    size_t head = (size_t)blockIdx.z * gridDim.y + blockIdx.y;   // [B, H] flattened
    const float* Qh = Q + head * N * d;
    const float* Kh = K + head * N * d;
    const float* Vh = V + head * N * d;
    int row = blockIdx.x * ROWS + threadIdx.x;
    bool active = row < N;                          // the last block may run past N

    float q[DMAX], acc[DMAX];
    for (int c = 0; c < d; ++c) {
        q[c] = active ? Qh[(size_t)row * d + c] : 0.0f;   // Q is read once
        acc[c] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;                  // the empty state

    for (int start = 0; start < N; start += BC) {
        int nk = min(BC, N - start);                // the last tile may be partial
        // The whole block copies the tile (rows of d floats, contiguous), even threads with no row:
        // they must all reach the barriers.
        for (int i = threadIdx.x; i < nk * d; i += ROWS) {
            Ks[i] = Kh[(size_t)start * d + i];
            Vs[i] = Vh[(size_t)start * d + i];
        }
        __syncthreads();                            // the tile is complete

        if (active) {
            float s[BC];
            float m_tile = -INFINITY;
            for (int j = 0; j < nk; ++j) {          // only the nk real keys
                float dot = 0.0f;
                for (int c = 0; c < d; ++c) dot += q[c] * Ks[j * d + c];
                s[j] = scale * dot;                 // scale once
                m_tile = fmaxf(m_tile, s[j]);
            }
            float m_new = m_tile;   // BUG: the tile max, not max(m, m_tile)         // finite: the tile has at least one key
            float alpha = expf(m - m_new);          // rescale of the old state (0 on the first tile)
            l *= alpha;
            for (int c = 0; c < d; ++c) acc[c] *= alpha;
            for (int j = 0; j < nk; ++j) {
                float p = expf(s[j] - m_new);
                l += p;
                for (int c = 0; c < d; ++c) acc[c] += p * Vs[j * d + c];
            }
            m = m_new;
        }
        __syncthreads();                            // everyone is done with the tile before it is overwritten
    }

    if (active) {
        for (int c = 0; c < d; ++c) O[(head * N + row) * d + c] = acc[c] / l;
        L[head * N + row] = m + logf(l);            // natural-log logsumexp of the scaled scores
    }
    // END SOLUTION
}
// expect: running state used before it was initialised
// Mistake: O is zeroed but m_buf and l_buf are used as they arrive (garbage; NaN on the emulator).
#define ROWS 64     // query rows per Q tile: thread t owns row t of each Q tile
#define BC 32       // keys per K/V tile in shared memory
#define DMAX 128    // largest head dimension

extern "C" __global__ void flash_fwd_fa1(const float* Q, const float* K, const float* V, float* O, float* L,
                                         float* m_buf, float* l_buf, int N, int d, float scale) {
    // FlashAttention-1 loop order: one block per head (blockIdx.x = head, blockIdx.y = batch).
    // OUTER loop over K/V tiles (loaded once into shared memory), INNER loop over Q tiles:
    // every row's state (m, l, unnormalised O) lives in GLOBAL memory (m_buf, l_buf, O) between
    // K/V tiles, so it is read and written once per K/V tile. m_buf and l_buf arrive uninitialised.
    __shared__ float Ks[BC * DMAX];
    __shared__ float Vs[BC * DMAX];
    size_t head = (size_t)blockIdx.y * gridDim.x + blockIdx.x;
    const float* Qh = Q + head * N * d;
    const float* Kh = K + head * N * d;
    const float* Vh = V + head * N * d;
    float* Oh = O + head * N * d;
    float* mh = m_buf + head * N;
    float* lh = l_buf + head * N;
    int t = threadIdx.x;

    // The empty state for every row. Thread t touches only rows t, t + ROWS, ... here and in
    // every loop below, so no barrier is needed between these writes and its later reads.
    for (int r = t; r < N; r += ROWS) {
        for (int c = 0; c < d; ++c) Oh[(size_t)r * d + c] = 0.0f;
    }

    float q[DMAX], p[BC];
    for (int start = 0; start < N; start += BC) {                // outer: K/V tiles
        int nk = min(BC, N - start);
        for (int i = t; i < nk * d; i += ROWS) {
            Ks[i] = Kh[(size_t)start * d + i];
            Vs[i] = Vh[(size_t)start * d + i];
        }
        __syncthreads();                                         // the K/V tile is complete

        for (int r = t; r < N; r += ROWS) {                      // inner: Q tiles, row r = tile * ROWS + t
            for (int c = 0; c < d; ++c) q[c] = Qh[(size_t)r * d + c];   // Q re-read for every K/V tile
            float m_tile = -INFINITY;
            for (int j = 0; j < nk; ++j) {
                float dot = 0.0f;
                for (int c = 0; c < d; ++c) dot += q[c] * Ks[j * d + c];
                p[j] = scale * dot;
                m_tile = fmaxf(m_tile, p[j]);
            }
            float m_old = mh[r];
            float m_new = fmaxf(m_old, m_tile);
            float alpha = expf(m_old - m_new);                   // 0 on the first K/V tile
            float l = lh[r] * alpha;
            for (int j = 0; j < nk; ++j) {
                p[j] = expf(p[j] - m_new);
                l += p[j];
            }
            for (int c = 0; c < d; ++c) {                        // O round-trips through global memory
                float o = alpha * Oh[(size_t)r * d + c];
                for (int j = 0; j < nk; ++j) o += p[j] * Vs[j * d + c];
                Oh[(size_t)r * d + c] = o;
            }
            mh[r] = m_new;
            lh[r] = l;
        }
        __syncthreads();                                         // done with this K/V tile before it is overwritten
    }

    for (int r = t; r < N; r += ROWS) {                          // final pass: normalise, write L
        float l = lh[r];
        for (int c = 0; c < d; ++c) Oh[(size_t)r * d + c] /= l;
        L[head * N + r] = mh[r] + logf(l);
    }
}

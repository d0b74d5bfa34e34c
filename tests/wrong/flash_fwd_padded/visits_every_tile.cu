// expect: the K and V bytes that loading each needed tile once
#define BR 64     // query rows per block = threads per block
#define BC 32     // keys per K/V tile
#define D_MAX 128 // largest head dimension (fixed-size local arrays)

// Key padding: batch b has key_lengths[b] valid keys (0..N); keys j >= key_lengths[b] are
// padding for every query and head of that batch. Arrays are [B, H, N, d], L is [B, H, N].
extern "C" __global__ void flash_fwd_padded(const float* Q, const float* K, const float* V,
                                            const int* key_lengths, float* O, float* L,
                                            int N, int d, float scale) {
    __shared__ float Ks[BC][D_MAX];
    __shared__ float Vs[BC][D_MAX];
    const size_t bh = (size_t)blockIdx.z * gridDim.y + blockIdx.y;
    Q += bh * N * d; K += bh * N * d; V += bh * N * d; O += bh * N * d; L += bh * N;

    const int i = blockIdx.x * BR + threadIdx.x;   // this thread's query row
    const bool active = i < N;                     // inactive threads still help load tiles
    float q[D_MAX], acc[D_MAX];
    for (int c = 0; c < d; ++c) { q[c] = active ? Q[(size_t)i * d + c] : 0.0f; acc[c] = 0.0f; }
    float m = -INFINITY, l = 0.0f;
    // BEGIN SOLUTION
    // Every row of this batch entry sees keys 0..len-1: tiles starting at or after len are
    // all padding and are skipped; only the last visited tile can be partly padding.
    const int len = key_lengths[blockIdx.z];
    const int n_tiles = ceil_div(N, BC);
    for (int t = 0; t < n_tiles; ++t) {
        const int k0 = t * BC;
        for (int idx = threadIdx.x; idx < BC * d; idx += BR) {   // whole block stages the tile
            const int r = idx / d, c = idx % d, j = k0 + r;
            Ks[r][c] = j < N ? K[(size_t)j * d + c] : 0.0f;
            Vs[r][c] = j < N ? V[(size_t)j * d + c] : 0.0f;
        }
        __syncthreads();
        const int n_keys = min(BC, len - k0);
        if (n_keys <= 0) { __syncthreads(); continue; }   // all padding: loaded, then ignored
        float s[BC];
        float m_tile = -INFINITY;
        for (int r = 0; r < n_keys; ++r) {
            float dot = 0.0f;
            for (int c = 0; c < d; ++c) dot += q[c] * Ks[r][c];
            s[r] = dot * scale;
            m_tile = fmaxf(m_tile, s[r]);
        }
        const float m_new = fmaxf(m, m_tile);    // finite: this tile has at least one valid key
        const float alpha = expf(m - m_new);     // e^(-inf - finite) = 0 on the first tile
        l *= alpha;
        for (int c = 0; c < d; ++c) acc[c] *= alpha;
        for (int r = 0; r < n_keys; ++r) {
            const float p = expf(s[r] - m_new);
            l += p;
            for (int c = 0; c < d; ++c) acc[c] += p * Vs[r][c];
        }
        m = m_new;
        __syncthreads();   // everyone is done with this tile before the next one overwrites it
    }
    if (active) {
        // A row with no valid key never entered the loop: l = 0, m = -INFINITY. Its output is
        // O = 0 and L = -INFINITY by convention; acc / l would be 0 / 0 = NaN.
        const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
        for (int c = 0; c < d; ++c) O[(size_t)i * d + c] = acc[c] * inv_l;
        L[i] = l > 0.0f ? m + logf(l) : -INFINITY;
    }
    // END SOLUTION
}
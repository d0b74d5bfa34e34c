// No -INFINITY mask: inside a key tile each row stops at its own diagonal key (j < min(i + 1, N)),
// and the tile loop runs while k0 < min(row0 + BR, N), the key after the block's last row, instead
// of counting last_row / BC + 1 tiles. A row whose keys all lie past the tile (i < k0) leaves its
// state untouched, and every row sees key 0 in the first tile, so m is finite from then on, l > 0
// at the end, and no -inf - (-inf) can arise. The products accumulate with fmaf.
#define BR 64
#define BC 32
#define MAXD 128

extern "C" __global__ void flash_fwd_causal(const float* Q, const float* K, const float* V, float* O, float* L, int N,
                                            int d, float scale) {
    __shared__ float Ks[BC][MAXD], Vs[BC][MAXD];
    const size_t head = (size_t)blockIdx.z * gridDim.y + blockIdx.y;
    const float* Qh = Q + head * N * d;
    const float* Kh = K + head * N * d;
    const float* Vh = V + head * N * d;
    const int row0 = blockIdx.x * BR;
    const int i = row0 + threadIdx.x;
    const int key_end = min(row0 + BR, N);  // keys >= key_end lie above the diagonal for the whole block
    const int my_end = i < N ? i + 1 : 0;   // this row's keys are 0 .. i; a row past N takes none
    float q[MAXD], acc[MAXD];
    for (int c = 0; c < d; ++c) {
        q[c] = my_end ? Qh[(size_t)i * d + c] : 0.0f;
        acc[c] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int k0 = 0; k0 < key_end; k0 += BC) {
        for (int e = threadIdx.x; e < BC * d; e += BR) {
            const int r = e / d, c = e - r * d;
            const bool in = k0 + r < N;
            Ks[r][c] = in ? Kh[(size_t)(k0 + r) * d + c] : 0.0f;
            Vs[r][c] = in ? Vh[(size_t)(k0 + r) * d + c] : 0.0f;
        }
        __syncthreads();
        const int stop = min(k0 + BC, my_end) - k0;  // keys of this tile the row sees (<= 0: none)
        if (stop > 0) {
            float s[BC];
            float m_new = m;
            for (int r = 0; r < stop; ++r) {
                float dot = 0.0f;
                for (int c = 0; c < d; ++c) dot = fmaf(q[c], Ks[r][c], dot);
                s[r] = dot * scale;
                m_new = fmaxf(m_new, s[r]);
            }
            const float alpha = expf(m - m_new);  // m = -inf on the row's first tile: alpha = 0
            l *= alpha;
            for (int c = 0; c < d; ++c) acc[c] *= alpha;
            for (int r = 0; r < stop; ++r) {
                const float p = expf(s[r] - m_new);
                l += p;
                for (int c = 0; c < d; ++c) acc[c] = fmaf(p, Vs[r][c], acc[c]);
            }
            m = m_new;
        }
        __syncthreads();
    }
    if (my_end) {
        for (int c = 0; c < d; ++c) O[(head * N + i) * d + c] = acc[c] / l;
        L[head * N + i] = m + logf(l);
    }
}

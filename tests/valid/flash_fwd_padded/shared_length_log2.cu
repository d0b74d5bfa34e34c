// The length read once by thread 0 into shared memory, the tile loop bounded by the length itself
// (k0 < len: a tile starting at or past it is all padding and never loaded), padding rows of the last
// tile never stored nor read (each row stops at key len - 1), scores in the log2 domain (scale * log2 e
// folded into q, exp2f), and an empty row recognised by its max still being -INFINITY rather than by
// l == 0. L goes back to the natural log at the end.
#define BR 64
#define BC 32
#define MAXD 128

extern "C" __global__ void flash_fwd_padded(const float* Q, const float* K, const float* V, const int* key_lengths,
                                            float* O, float* L, int N, int d, float scale) {
    __shared__ float Ks[BC][MAXD], Vs[BC][MAXD];
    __shared__ int len_s;
    if (threadIdx.x == 0) len_s = key_lengths[blockIdx.z];
    __syncthreads();
    const int len = len_s;
    const size_t base = ((size_t)blockIdx.z * gridDim.y + blockIdx.y) * N;  // first row of this (b, h)
    const int i = blockIdx.x * BR + threadIdx.x;
    const float fold = scale * 1.4426950408889634f;
    float q[MAXD], acc[MAXD];
    for (int c = 0; c < d; ++c) {
        q[c] = i < N ? Q[(base + i) * d + c] * fold : 0.0f;
        acc[c] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int k0 = 0; k0 < len; k0 += BC) {
        const int valid = min(BC, len - k0);
        for (int e = threadIdx.x; e < valid * d; e += BR) {
            const int r = e / d, c = e % d;
            Ks[r][c] = K[(base + k0 + r) * d + c];
            Vs[r][c] = V[(base + k0 + r) * d + c];
        }
        __syncthreads();
        float s[BC];
        float m_new = m;
        for (int r = 0; r < valid; ++r) {
            float dot = 0.0f;
            for (int c = 0; c < d; ++c) dot += q[c] * Ks[r][c];
            s[r] = dot;
            m_new = fmaxf(m_new, dot);
        }
        const float alpha = exp2f(m - m_new);  // valid >= 1, so m_new is finite
        l *= alpha;
        for (int c = 0; c < d; ++c) acc[c] *= alpha;
        for (int r = 0; r < valid; ++r) {
            const float p = exp2f(s[r] - m_new);
            l += p;
            for (int c = 0; c < d; ++c) acc[c] += p * Vs[r][c];
        }
        m = m_new;
        __syncthreads();
    }
    if (i < N) {
        const bool empty = m == -INFINITY;
        for (int c = 0; c < d; ++c) O[(base + i) * d + c] = empty ? 0.0f : acc[c] / l;
        L[base + i] = empty ? -INFINITY : (m + log2f(l)) * 0.6931471805599453f;
    }
}

// Scores in the log2 domain (scale * log2 e folded into q once, exp2f per key), the running state
// updated key by key rather than tile by tile, and L converted back to the natural log at the end.
#define BR 64
#define BC 32
#define MAXD 128

extern "C" __global__ void flash_fwd_row(const float* Q, const float* K, const float* V, float* O, float* L, int N,
                                         int d, float scale) {
    __shared__ float Ks[BC][MAXD], Vs[BC][MAXD];
    const size_t head = (size_t)blockIdx.z * gridDim.y + blockIdx.y;
    const float* Kh = K + head * N * d;
    const float* Vh = V + head * N * d;
    const int i = blockIdx.x * BR + threadIdx.x;
    const bool mine = i < N;
    float q[MAXD], acc[MAXD];
    const float fold = scale * 1.4426950408889634f;
    for (int c = 0; c < d; ++c) {
        q[c] = mine ? Q[(head * N + i) * d + c] * fold : 0.0f;
        acc[c] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int k0 = 0; k0 < N; k0 += BC) {
        for (int e = threadIdx.x; e < BC * d; e += blockDim.x) {
            const int r = e / d, c = e % d;
            Ks[r][c] = k0 + r < N ? Kh[(size_t)(k0 + r) * d + c] : 0.0f;
            Vs[r][c] = k0 + r < N ? Vh[(size_t)(k0 + r) * d + c] : 0.0f;
        }
        __syncthreads();
        for (int r = 0; r < BC && k0 + r < N; ++r) {
            float s = 0.0f;
            for (int c = 0; c < d; ++c) s += q[c] * Ks[r][c];
            if (s > m) {  // a new maximum: rescale what was accumulated against the old one
                const float alpha = exp2f(m - s);
                l *= alpha;
                for (int c = 0; c < d; ++c) acc[c] *= alpha;
                m = s;
            }
            const float p = exp2f(s - m);
            l += p;
            for (int c = 0; c < d; ++c) acc[c] += p * Vs[r][c];
        }
        __syncthreads();
    }
    if (mine) {
        for (int c = 0; c < d; ++c) O[(head * N + i) * d + c] = acc[c] / l;
        L[head * N + i] = (m + log2f(l)) * 0.6931471805599453f;
    }
}

// K staged transposed (column c of the tile is the BC consecutive floats Kt[c * BC ..]) instead of in
// padded rows: in the score loop the 16 lanes of a row read 16 consecutive words, so no padding is
// needed there; Q, V and the output accumulator keep rows padded to d + 1. Every lane of a row keeps
// the row's running max and sum in registers (the shuffles give all 16 lanes the same values) instead
// of in shared memory, and the tile's probabilities are summed from S by the lane that needs them.
#define BR 16
#define BC 16

extern "C" __global__ void flash_fwd_fa2_padded(const float* Q, const float* K, const float* V, float* O, float* L,
                                                int N, int d, float scale) {
    extern __shared__ float smem[];
    const int ld = d + 1;
    float* Qs = smem;          // [BR][ld]
    float* Os = Qs + BR * ld;  // [BR][ld]
    float* Kt = Os + BR * ld;  // [d][BC]: fits in the [BC][ld] the launch reserves for K
    float* Vs = Kt + BC * ld;  // [BC][ld]
    float* S = Vs + BC * ld;   // [BR][BC]
    const int x = threadIdx.x, y = threadIdx.y, tid = y * BC + x;
    const size_t head = (size_t)blockIdx.z * gridDim.y + blockIdx.y;
    const int q0 = blockIdx.x * BR;
    for (int e = tid; e < BR * d; e += BR * BC) {
        const int r = e / d, c = e % d;
        Qs[r * ld + c] = q0 + r < N ? Q[(head * N + q0 + r) * d + c] : 0.0f;
        Os[r * ld + c] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;  // row y's state, the same in all 16 lanes of the row
    for (int k0 = 0; k0 < N; k0 += BC) {
        const int nk = min(BC, N - k0);
        __syncthreads();  // the previous tile's Kt, Vs and S are no longer read
        for (int e = tid; e < BC * d; e += BR * BC) {
            const int r = e / d, c = e % d;
            const bool in = r < nk;
            Kt[c * BC + r] = in ? K[(head * N + k0 + r) * d + c] : 0.0f;
            Vs[r * ld + c] = in ? V[(head * N + k0 + r) * d + c] : 0.0f;
        }
        __syncthreads();
        float s = -INFINITY;
        if (x < nk) {
            float dot = 0.0f;
            for (int c = 0; c < d; ++c) dot += Qs[y * ld + c] * Kt[c * BC + x];
            s = dot * scale;
        }
        float m_new = s;
        for (int off = 1; off < BC; off <<= 1) m_new = fmaxf(m_new, __shfl_xor_sync(FULL_MASK, m_new, off, BC));
        m_new = fmaxf(m_new, m);
        const float alpha = expf(m - m_new);
        S[y * BC + x] = expf(s - m_new);
        __syncthreads();
        float l_tile = 0.0f;
        for (int j = 0; j < nk; ++j) l_tile += S[y * BC + j];
        l = l * alpha + l_tile;
        m = m_new;
        for (int c = x; c < d; c += BC) {
            float o = Os[y * ld + c] * alpha;
            for (int j = 0; j < nk; ++j) o += S[y * BC + j] * Vs[j * ld + c];
            Os[y * ld + c] = o;
        }
    }
    if (q0 + y < N) {
        for (int c = x; c < d; c += BC) O[(head * N + q0 + y) * d + c] = Os[y * ld + c] / l;
        if (x == 0) L[head * N + q0 + y] = m + logf(l);
    }
}

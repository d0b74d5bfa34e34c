// FlashAttention forward, one head, fp32: one thread per query row, K/V tiles in shared memory,
// online softmax. Q, K, V, O are S x D, row-major.
#define D 64
#define BC 64

extern "C" __global__ void flash_fwd(const float* Q, const float* K, const float* V, float* O, int S, float scale) {
    __shared__ float Ks[BC][D];
    __shared__ float Vs[BC][D];
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    float q[D], o[D];
    for (int k = 0; k < D; ++k) {
        q[k] = row < S ? Q[row * D + k] * scale : 0.0f;
        o[k] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int j0 = 0; j0 < S; j0 += BC) {
        for (int idx = threadIdx.x; idx < BC * D; idx += blockDim.x) {
            int r = idx / D, c = idx % D;
            bool in = j0 + r < S;
            Ks[r][c] = in ? K[(j0 + r) * D + c] : 0.0f;
            Vs[r][c] = in ? V[(j0 + r) * D + c] : 0.0f;
        }
        __syncthreads();
        if (row < S) {
            for (int j = 0; j < BC && j0 + j < S; ++j) {
                float s = 0.0f;
#pragma unroll 8
                for (int k = 0; k < D; ++k) s += q[k] * Ks[j][k];
                float m_new = fmaxf(m, s);
                float corr = expf(m - m_new);
                float p = expf(s - m_new);
                l = l * corr + p;
                for (int k = 0; k < D; ++k) o[k] = o[k] * corr + p * Vs[j][k];
                m = m_new;
            }
        }
        __syncthreads();
    }
    if (row < S)
        for (int k = 0; k < D; ++k) O[row * D + k] = o[k] / l;
}

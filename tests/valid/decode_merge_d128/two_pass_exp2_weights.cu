// The weights e^{L_s - m} computed as exp2f((L_s - m) * log2 e), the max kept in the natural log so L
// is m + log2f(l) * ln 2; the max and the sum of the weights found once per query, by one thread each,
// and left in shared memory (not redone for every column); then every thread combines the O_s of its
// columns, recomputing the weights. An entry whose splits are all empty subtracts 0 from its -INFINITY
// max (weights exp2f(-inf) = 0) and gets O = 0, L = -INFINITY.
#include <cuda_fp16.h>
#ifndef HEAD_DIM
#define HEAD_DIM 128
#endif
#define MAX_Q 16  // n_q is 1..16

extern "C" __global__ void decode_merge(const float* O_part, const float* L_part, __half* O, float* L, int n_q,
                                        int splits) {
    __shared__ float shift_s[MAX_Q], inv_l_s[MAX_Q];
    const float LOG2E = 1.4426950408889634f;
    const size_t head = (size_t)blockIdx.y * gridDim.x + blockIdx.x;
    const float* Lh = L_part + head * splits * n_q;
    const float* Oh = O_part + head * splits * n_q * HEAD_DIM;
    for (int i = threadIdx.x; i < n_q; i += blockDim.x) {
        float m = -INFINITY;
        for (int s = 0; s < splits; ++s) m = fmaxf(m, Lh[s * n_q + i]);
        const float shift = m == -INFINITY ? 0.0f : m;
        float l = 0.0f;
        for (int s = 0; s < splits; ++s) l += exp2f((Lh[s * n_q + i] - shift) * LOG2E);
        shift_s[i] = shift;
        inv_l_s[i] = l > 0.0f ? 1.0f / l : 0.0f;
        L[head * n_q + i] = l > 0.0f ? m + log2f(l) * 0.6931471805599453f : -INFINITY;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < n_q * HEAD_DIM; e += blockDim.x) {
        const int i = e / HEAD_DIM, c = e % HEAD_DIM;
        const float shift = shift_s[i];
        float o = 0.0f;
        for (int s = 0; s < splits; ++s)
            o += exp2f((Lh[s * n_q + i] - shift) * LOG2E) * Oh[((size_t)s * n_q + i) * HEAD_DIM + c];
        O[(head * n_q + i) * HEAD_DIM + c] = __float2half_rn(o * inv_l_s[i]);
    }
}

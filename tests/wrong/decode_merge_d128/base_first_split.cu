// expect: without subtracting the max
// The merge measures every split against split 0's L instead of the largest: a later split 120 above overflows e^x.
#include <cuda_fp16.h>
#ifndef HEAD_DIM
#define HEAD_DIM 128
#endif

extern "C" __global__ void decode_merge(const float* O_part, const float* L_part, __half* O, float* L, int n_q,
                                        int splits) {
    const size_t head = (size_t)blockIdx.y * gridDim.x + blockIdx.x;
    const float* Lp = L_part + head * splits * n_q;
    const float* Op = O_part + head * splits * n_q * HEAD_DIM;
    for (int e = threadIdx.x; e < n_q * HEAD_DIM; e += blockDim.x) {
        const int i = e / HEAD_DIM, c = e % HEAD_DIM;
        float mx = -INFINITY;
        for (int s = 0; s < splits; ++s) mx = fmaxf(mx, Lp[s * n_q + i]);
        const float base = Lp[i] == -INFINITY ? 0.0f : Lp[i];
        float l = 0.0f, o = 0.0f;
        for (int s = 0; s < splits; ++s) {
            const float w = expf(Lp[s * n_q + i] - base);
            l += w;
            o += w * Op[((size_t)s * n_q + i) * HEAD_DIM + c];
        }
        O[(head * n_q + i) * HEAD_DIM + c] = __float2half(l > 0.0f ? o / l : 0.0f);
        if (c == 0) L[head * n_q + i] = l > 0.0f ? base + logf(l) : -INFINITY;
    }
}

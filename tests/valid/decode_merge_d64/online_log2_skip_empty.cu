// One pass over the splits instead of a max pass then a sum pass: a running (m, l, o) in the log2
// domain (t = L_s * log2 e), rescaled with exp2f when a split raises the max; empty splits
// (L_s = -INFINITY) are skipped outright, so no -inf - (-inf) can arise, and an entry that never met a
// nonempty split (m still -INFINITY) gets O = 0, L = -INFINITY. Each thread handles one (query,
// column) pair per pass of the block, the pairs laid out column-major (e % n_q is the query).
#include <cuda_fp16.h>
#ifndef HEAD_DIM
#define HEAD_DIM 64
#endif

extern "C" __global__ void decode_merge(const float* O_part, const float* L_part, __half* O, float* L, int n_q,
                                        int splits) {
    const size_t head = (size_t)blockIdx.y * gridDim.x + blockIdx.x;
    const float* Lh = L_part + head * splits * n_q;
    const float* Oh = O_part + head * splits * n_q * HEAD_DIM;
    const float LOG2E = 1.4426950408889634f, LN2 = 0.6931471805599453f;
    for (int e = threadIdx.x; e < n_q * HEAD_DIM; e += blockDim.x) {
        const int i = e % n_q, c = e / n_q;
        float m = -INFINITY, l = 0.0f, o = 0.0f;
        for (int s = 0; s < splits; ++s) {
            const float Ls = Lh[s * n_q + i];
            if (Ls == -INFINITY) continue;  // an empty split weighs nothing
            const float t = Ls * LOG2E;
            const float Os = Oh[((size_t)s * n_q + i) * HEAD_DIM + c];
            if (t > m) {
                const float alpha = exp2f(m - t);  // 0 the first time (m = -inf, t finite)
                l = l * alpha + 1.0f;
                o = o * alpha + Os;
                m = t;
            } else {
                const float w = exp2f(t - m);
                l += w;
                o += w * Os;
            }
        }
        const bool empty = m == -INFINITY;
        O[(head * n_q + i) * HEAD_DIM + c] = __float2half_rn(empty ? 0.0f : o / l);
        if (c == 0) L[head * n_q + i] = empty ? -INFINITY : (m + log2f(l)) * LN2;
    }
}

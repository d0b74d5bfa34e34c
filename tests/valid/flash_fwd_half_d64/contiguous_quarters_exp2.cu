// also valid for: flash_fwd_half_d128
// Each of a row's four threads owns a contiguous quarter of the columns (lane g: columns
// g * HEAD_DIM / 4 ...) instead of interleaved float4 groups; halves converted one at a time with
// __half2float / __float2half_rn; K and V staged as plain float rows; the quad's partial dot products
// reduced with __shfl_down_sync and broadcast from the quad's first lane with __shfl_sync; scores in
// the log2 domain (scale * log2 e folded into q, exp2f), L converted back to the natural log.
#include <cuda_fp16.h>
#ifndef HEAD_DIM
#define HEAD_DIM 64
#endif
#define ROWS 64
#define TPR 4
#define BC 32
#define QUARTER (HEAD_DIM / TPR)

extern "C" __global__ void flash_fwd_half(const __half* Q, const __half* K, const __half* V, __half* O, float* L,
                                          int N, float scale) {
    __shared__ float Ks[BC][HEAD_DIM], Vs[BC][HEAD_DIM];
    const size_t head = (size_t)blockIdx.z * gridDim.y + blockIdx.y;
    const __half* Kh = K + head * N * HEAD_DIM;
    const __half* Vh = V + head * N * HEAD_DIM;
    const int lane = threadIdx.x % 32, g = threadIdx.x % TPR, c0 = g * QUARTER;
    const int row = blockIdx.x * ROWS + threadIdx.x / TPR;
    const bool active = row < N;
    const float fold = scale * 1.4426950408889634f;
    float q[QUARTER], acc[QUARTER];
#pragma unroll
    for (int c = 0; c < QUARTER; ++c) {
        q[c] = active ? __half2float(Q[(head * N + row) * HEAD_DIM + c0 + c]) * fold : 0.0f;
        acc[c] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int k0 = 0; k0 < N; k0 += BC) {
        for (int e = threadIdx.x; e < BC * HEAD_DIM; e += ROWS * TPR) {
            const int r = e / HEAD_DIM, c = e % HEAD_DIM;
            const bool in = k0 + r < N;
            Ks[r][c] = in ? __half2float(Kh[(size_t)(k0 + r) * HEAD_DIM + c]) : 0.0f;
            Vs[r][c] = in ? __half2float(Vh[(size_t)(k0 + r) * HEAD_DIM + c]) : 0.0f;
        }
        __syncthreads();
        const int keys = min(BC, N - k0);
        float s[BC];
        float m_new = m;
#pragma unroll
        for (int r = 0; r < BC; ++r) {
            float dot = 0.0f;
#pragma unroll
            for (int c = 0; c < QUARTER; ++c) dot += q[c] * Ks[r][c0 + c];
            dot += __shfl_down_sync(FULL_MASK, dot, 2);  // lane g += lane g + 2
            dot += __shfl_down_sync(FULL_MASK, dot, 1);  // lane 0 of the quad now holds the sum
            dot = __shfl_sync(FULL_MASK, dot, lane & ~(TPR - 1));
            s[r] = r < keys ? dot : -INFINITY;
            m_new = fmaxf(m_new, s[r]);
        }
        const float alpha = exp2f(m - m_new);  // every tile has a key: m_new is finite
        l *= alpha;
#pragma unroll
        for (int c = 0; c < QUARTER; ++c) acc[c] *= alpha;
#pragma unroll
        for (int r = 0; r < BC; ++r) {
            const float p = exp2f(s[r] - m_new);
            l += p;
#pragma unroll
            for (int c = 0; c < QUARTER; ++c) acc[c] += p * Vs[r][c0 + c];
        }
        m = m_new;
        __syncthreads();
    }
    if (active) {
#pragma unroll
        for (int c = 0; c < QUARTER; ++c) O[(head * N + row) * HEAD_DIM + c0 + c] = __float2half_rn(acc[c] / l);
        if (g == 0) L[head * N + row] = (m + log2f(l)) * 0.6931471805599453f;
    }
}

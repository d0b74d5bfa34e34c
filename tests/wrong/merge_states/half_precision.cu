// expect: computes in lower precision
#include <cuda_fp16.h>
extern "C" __global__ void merge_states(const float* m_a, const float* l_a, const float* acc_a,
                                        const float* m_b, const float* l_b, const float* acc_b,
                                        float* m_out, float* l_out, float* acc_out, int rows, int d) {
    int r = blockIdx.y, c = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float m = fmaxf(m_a[r], m_b[r]);
    float shift = (m == -INFINITY) ? 0.0f : m;
    __half alpha = __float2half(expf(m_a[r] - shift)), beta = __float2half(expf(m_b[r] - shift));
    if (c < d) acc_out[r * d + c] = __half2float(alpha * __float2half(acc_a[r * d + c]) + beta * __float2half(acc_b[r * d + c]));
    if (c == 0) { m_out[r] = m; l_out[r] = __half2float(alpha * __float2half(l_a[r]) + beta * __float2half(l_b[r])); }
}

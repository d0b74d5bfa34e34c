// expect: computes in lower precision
#include <cuda_fp16.h>
extern "C" __global__ void online_softmax_rows(const float* x, float* y, int rows, int cols) {
    int row = blockIdx.x, lane = threadIdx.x;
    if (row >= rows) return;
    const float* xr = x + (size_t)row * cols;
    float* yr = y + (size_t)row * cols;
    float m = -INFINITY;
    __half l = __float2half(0.0f);                  // 11 significant bits for the running sum
    for (int j = lane; j < cols; j += 32) {
        float m_new = fmaxf(m, xr[j]);
        l = __float2half(__half2float(l) * expf(m - m_new) + expf(xr[j] - m_new));
        m = m_new;
    }
    float lf = __half2float(l);
    for (int offset = 16; offset > 0; offset >>= 1) {
        float m_o = __shfl_xor_sync(FULL_MASK, m, offset), l_o = __shfl_xor_sync(FULL_MASK, lf, offset);
        float m_new = fmaxf(m, m_o);
        float shift = (m_new == -INFINITY) ? 0.0f : m_new;
        lf = __half2float(__float2half(lf * expf(m - shift) + l_o * expf(m_o - shift)));
        m = m_new;
    }
    for (int j = lane; j < cols; j += 32) yr[j] = expf(xr[j] - m) / lf;
}

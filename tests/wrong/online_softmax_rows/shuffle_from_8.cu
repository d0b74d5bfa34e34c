// expect: the shuffle reduction stops short
extern "C" __global__ void online_softmax_rows(const float* x, float* y, int rows, int cols) {
    int row = blockIdx.x, lane = threadIdx.x;
    if (row >= rows) return;
    const float* xr = x + (size_t)row * cols;
    float* yr = y + (size_t)row * cols;
    float m = -INFINITY, l = 0.0f;
    for (int j = lane; j < cols; j += 32) {
        float m_new = fmaxf(m, xr[j]);
        l = l * expf(m - m_new) + expf(xr[j] - m_new);
        m = m_new;
    }
    for (int offset = 8; offset > 0; offset >>= 1) {   // 16 lanes per group: half a warp
        float m_o = __shfl_xor_sync(FULL_MASK, m, offset), l_o = __shfl_xor_sync(FULL_MASK, l, offset);
        float m_new = fmaxf(m, m_o);
        float shift = (m_new == -INFINITY) ? 0.0f : m_new;
        l = l * expf(m - shift) + l_o * expf(m_o - shift);
        m = m_new;
    }
    for (int j = lane; j < cols; j += 32) yr[j] = expf(xr[j] - m) / l;
}

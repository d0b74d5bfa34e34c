// expect: missing rescale when merging lanes
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
    for (int offset = 16; offset > 0; offset >>= 1) {
        float m_o = __shfl_xor_sync(FULL_MASK, m, offset), l_o = __shfl_xor_sync(FULL_MASK, l, offset);
        m = fmaxf(m, m_o);
        l += l_o;                                   // the two sums were taken against different maxima
    }
    for (int j = lane; j < cols; j += 32) yr[j] = expf(xr[j] - m) / l;
}

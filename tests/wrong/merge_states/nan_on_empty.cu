// expect: NaN computed by the kernel
extern "C" __global__ void merge_states(const float* m_a, const float* l_a, const float* acc_a,
                                        const float* m_b, const float* l_b, const float* acc_b,
                                        float* m_out, float* l_out, float* acc_out, int rows, int d) {
    int r = blockIdx.y, c = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float m = fmaxf(m_a[r], m_b[r]);
    float alpha = expf(m_a[r] - m), beta = expf(m_b[r] - m);   // both empty: -inf - (-inf) = NaN
    if (c < d) acc_out[r * d + c] = alpha * acc_a[r * d + c] + beta * acc_b[r * d + c];
    if (c == 0) { m_out[r] = m; l_out[r] = alpha * l_a[r] + beta * l_b[r]; }
}

// expect: differ
extern "C" __global__ void merge_states(const float* m_a, const float* l_a, const float* acc_a,
                                        const float* m_b, const float* l_b, const float* acc_b,
                                        float* m_out, float* l_out, float* acc_out, int rows, int d) {
    int r = blockIdx.y, c = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float m = fmaxf(m_a[r], m_b[r]);
    float shift = (m == -INFINITY) ? 0.0f : m;
    float alpha = expf(m_a[r] - shift), beta = expf(m_b[r] - shift);
    if (c < d) acc_out[r * d + c] = beta * acc_a[r * d + c] + alpha * acc_b[r * d + c];   // factors swapped
    if (c == 0) { m_out[r] = m; l_out[r] = beta * l_a[r] + alpha * l_b[r]; }
}

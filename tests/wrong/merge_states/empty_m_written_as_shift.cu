// expect: are not -inf where -inf was expected
extern "C" __global__ void merge_states(const float* m_a, const float* l_a, const float* acc_a,
                                        const float* m_b, const float* l_b, const float* acc_b,
                                        float* m_out, float* l_out, float* acc_out, int rows, int d) {
    int r = blockIdx.y;                                 // the row
    int c = blockIdx.x * blockDim.x + threadIdx.x;      // the column of acc this thread merges
    if (r >= rows) return;
    // BEGIN SOLUTION
    float ma = m_a[r], mb = m_b[r];
    float m = fmaxf(ma, mb);
    // Both sides empty: m = -inf and e^{-inf - (-inf)} would be NaN. Subtracting 0 instead
    // gives e^{-inf} = 0 for both sides: the empty state again.
    float shift = (m == -INFINITY) ? 0.0f : m;
    float alpha = expf(ma - shift);                     // rescales side a to the common max
    float beta = expf(mb - shift);                      // ... and side b
    if (c < d) acc_out[(size_t)r * d + c] = alpha * acc_a[(size_t)r * d + c] + beta * acc_b[(size_t)r * d + c];
    if (c == 0) {                                       // one thread per row writes the scalars
        m_out[r] = shift;   // BUG: the shift (0 for two empty states) instead of the max
        l_out[r] = alpha * l_a[r] + beta * l_b[r];
    }
    // END SOLUTION
}
// expect: NaN computed by the kernel
extern "C" __global__ void online_softmax_rows(const float* x, float* y, int rows, int cols) {
    int row = blockIdx.x;           // one warp (block of 32 threads) per row
    int lane = threadIdx.x;         // 0..31
    if (row >= rows) return;        // the whole warp leaves together, so shuffles stay legal
    const float* xr = x + (size_t)row * cols;
    float* yr = y + (size_t)row * cols;
    // BEGIN SOLUTION
    // 1. Each lane runs the online softmax over its strided slice: columns lane, lane+32, ...
    //    (consecutive lanes read consecutive addresses: coalesced).
    float m = -INFINITY, l = 0.0f;
    for (int j = lane; j < cols; j += 32) {
        float v = xr[j];
        float m_new = v;   // BUG: re-measured against the newest value                    // finite: v is
        l = l * expf(m - m_new) + expf(v - m_new);    // rescale the old sum to the new max
        m = m_new;
    }
    // 2. Butterfly: after the offsets 16, 8, 4, 2, 1 every lane holds the merge of all 32.
    //    A lane that saw no column (cols < 32) is the empty state m = -inf, l = 0.
    for (int offset = 16; offset > 0; offset >>= 1) {
        float m_o = __shfl_xor_sync(FULL_MASK, m, offset);
        float l_o = __shfl_xor_sync(FULL_MASK, l, offset);
        float m_new = fmaxf(m, m_o);
        float shift = (m_new == -INFINITY) ? 0.0f : m_new;   // two empty lanes: avoid -inf - -inf
        l = l * expf(m - shift) + l_o * expf(m_o - shift);
        m = m_new;
    }
    // 3. Second pass over the row: normalise with the row's final (m, l).
    float inv_l = 1.0f / l;
    for (int j = lane; j < cols; j += 32) yr[j] = expf(xr[j] - m) * inv_l;
    // END SOLUTION
}
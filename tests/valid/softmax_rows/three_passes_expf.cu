// Three passes (max, sum, write) with __expf, the sum accumulated in double.
extern "C" __global__ void softmax_rows(const float* S, float* P, int N) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    const float* row = S + (size_t)i * N;
    float m = row[0];
    for (int j = 1; j < N; ++j) m = fmaxf(m, row[j]);
    double sum = 0.0;
    for (int j = 0; j < N; ++j) sum += __expf(row[j] - m);
    const float inv = (float)(1.0 / sum);
    for (int j = 0; j < N; ++j) P[(size_t)i * N + j] = __expf(row[j] - m) * inv;
}

// expect: normalised over columns
extern "C" __global__ void softmax_rows(const float* S, float* P, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;  // i is used as a column here
    if (i >= N) return;
    float m = -INFINITY;
    for (int j = 0; j < N; ++j) m = fmaxf(m, S[j * N + i]);  // walks down column i
    float l = 0.0f;
    for (int j = 0; j < N; ++j) l += expf(S[j * N + i] - m);
    for (int j = 0; j < N; ++j) P[j * N + i] = expf(S[j * N + i] - m) / l;
}

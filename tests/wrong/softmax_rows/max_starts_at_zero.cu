// expect: row max starts at 0
extern "C" __global__ void softmax_rows(const float* S, float* P, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    float m = 0.0f;  // should be -INFINITY: a row of all very negative logits keeps m = 0
    for (int j = 0; j < N; ++j) m = fmaxf(m, S[i * N + j]);
    float l = 0.0f;
    for (int j = 0; j < N; ++j) l += expf(S[i * N + j] - m);
    for (int j = 0; j < N; ++j) P[i * N + j] = expf(S[i * N + j] - m) / l;
}

// expect: unsafe softmax
extern "C" __global__ void softmax_rows(const float* S, float* P, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    float l = 0.0f;
    for (int j = 0; j < N; ++j) l += expf(S[i * N + j]);  // no max subtracted: overflows past 88.7
    for (int j = 0; j < N; ++j) P[i * N + j] = expf(S[i * N + j]) / l;
}

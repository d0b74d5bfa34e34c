// expect: not normalised
extern "C" __global__ void softmax_rows(const float* S, float* P, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    float m = -INFINITY;
    for (int j = 0; j < N; ++j) m = fmaxf(m, S[i * N + j]);
    for (int j = 0; j < N; ++j) P[i * N + j] = expf(S[i * N + j] - m);  // never divided by the sum
}

// expect: OutOfBoundsError
extern "C" __global__ void softmax_rows(const float* S, float* P, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;  // no `if (i >= N) return;`: 128 threads, N rows
    float m = -INFINITY;
    for (int j = 0; j < N; ++j) m = fmaxf(m, S[i * N + j]);
    float l = 0.0f;
    for (int j = 0; j < N; ++j) l += expf(S[i * N + j] - m);
    for (int j = 0; j < N; ++j) P[i * N + j] = expf(S[i * N + j] - m) / l;
}

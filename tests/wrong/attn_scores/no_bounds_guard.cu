// expect: OutOfBoundsError
extern "C" __global__ void attn_scores(const float* Q, const float* K, float* S, int N, int d, float scale) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    float acc = 0.0f;  // no guard: the 16x16 tiles run past N
    for (int k = 0; k < d; ++k) acc += Q[i * d + k] * K[j * d + k];
    S[i * N + j] = scale * acc;
}

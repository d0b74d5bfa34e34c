// expect: scale applied twice
extern "C" __global__ void attn_scores(const float* Q, const float* K, float* S, int N, int d, float scale) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= N || j >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < d; ++k) acc += scale * Q[i * d + k] * K[j * d + k];  // scaled inside the loop...
    S[i * N + j] = scale * acc;                                               // ...and again here
}

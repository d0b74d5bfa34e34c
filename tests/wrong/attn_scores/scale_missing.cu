// expect: scale never applied
extern "C" __global__ void attn_scores(const float* Q, const float* K, float* S, int N, int d, float scale) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= N || j >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < d; ++k) acc += Q[i * d + k] * K[j * d + k];
    S[i * N + j] = acc;  // forgot the scale
}

// expect: scale never applied
extern "C" __global__ void attn_scores_batched(const float* Q, const float* K, float* S, int BH, int N, int d, float scale) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    size_t z = blockIdx.z;
    if (i >= N || j >= N) return;
    const float* q = Q + z * N * d;
    const float* k_ = K + z * N * d;
    float acc = 0.0f;
    for (int k = 0; k < d; ++k) acc += q[i * d + k] * k_[j * d + k];
    S[z * N * N + i * N + j] = acc;  // forgot the scale
}

// expect: were never written
extern "C" __global__ void attn_scores_batched(const float* Q, const float* K, float* S, int BH, int N, int d, float scale) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    const float* q = Q + (size_t)blockIdx.z * N * d;
    const float* k_ = K + (size_t)blockIdx.z * N * d;
    if (i >= N || j >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < d; ++k) acc += q[i * d + k] * k_[j * d + k];
    S[i * N + j] = scale * acc;  // every head writes into head 0's slice of S
}

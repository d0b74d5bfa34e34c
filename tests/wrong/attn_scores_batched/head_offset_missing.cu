// expect: head offset missing
extern "C" __global__ void attn_scores_batched(const float* Q, const float* K, float* S, int BH, int N, int d, float scale) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    int z = blockIdx.z;
    if (i >= N || j >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < d; ++k) acc += Q[i * d + k] * K[j * d + k];  // head 0's Q and K for every z
    S[(size_t)z * N * N + i * N + j] = scale * acc;
}

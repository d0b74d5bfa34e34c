// expect: OutOfBoundsError
extern "C" __global__ void attn_scores_batched(const float* Q, const float* K, float* S, int BH, int N, int d, float scale) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    size_t head = (size_t)blockIdx.z * N * N;  // S's head stride, reused for Q and K (theirs is N * d)
    if (i >= N || j >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < d; ++k) acc += Q[head + i * d + k] * K[head + j * d + k];
    S[head + i * N + j] = scale * acc;
}

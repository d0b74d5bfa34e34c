// expect: is the transpose
extern "C" __global__ void attn_scores(const float* Q, const float* K, float* S, int N, int d, float scale) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;  // query row taken from x ...
    int j = blockIdx.y * blockDim.y + threadIdx.y;  // ... and key column from y
    if (i >= N || j >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < d; ++k) acc += Q[i * d + k] * K[j * d + k];
    S[j * N + i] = scale * acc;  // stored at (row = y, column = x): S^T
}

// expect: inner loop stops at d
extern "C" __global__ void attn_pv(const float* P, const float* V, float* O, int N, int d) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= N || c >= d) return;
    float acc = 0.0f;
    for (int j = 0; j < d; ++j) acc += P[i * N + j] * V[j * d + c];  // sums over d keys, not N
    O[i * d + c] = acc;
}

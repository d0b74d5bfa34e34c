// expect: P transposed
extern "C" __global__ void attn_pv(const float* P, const float* V, float* O, int N, int d) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= N || c >= d) return;
    float acc = 0.0f;
    for (int j = 0; j < N; ++j) acc += P[j * N + i] * V[j * d + c];  // P read down column i
    O[i * d + c] = acc;
}

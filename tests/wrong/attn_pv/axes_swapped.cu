// expect: were never written
extern "C" __global__ void attn_pv(const float* P, const float* V, float* O, int N, int d) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;  // row from x, but the grid's x covers d, not N
    int c = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= N || c >= d) return;
    float acc = 0.0f;
    for (int j = 0; j < N; ++j) acc += P[i * N + j] * V[j * d + c];
    O[i * d + c] = acc;
}

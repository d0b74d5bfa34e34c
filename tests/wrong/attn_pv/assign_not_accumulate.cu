// expect: only the last key counted
extern "C" __global__ void attn_pv(const float* P, const float* V, float* O, int N, int d) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= N || c >= d) return;
    for (int j = 0; j < N; ++j) O[i * d + c] = P[i * N + j] * V[j * d + c];  // = instead of +=
}

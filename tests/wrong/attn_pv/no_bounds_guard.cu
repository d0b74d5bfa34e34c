// expect: OutOfBoundsError
extern "C" __global__ void attn_pv(const float* P, const float* V, float* O, int N, int d) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    float acc = 0.0f;  // no guard: threads with c >= d or i >= N run too
    for (int j = 0; j < N; ++j) acc += P[i * N + j] * V[j * d + c];
    O[i * d + c] = acc;
}

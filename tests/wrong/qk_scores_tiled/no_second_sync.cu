// expect: threads race on memory
// No __syncthreads() after the inner loop: the next tile overwrites Qs/Ks while other
// threads still read them.
#define TILE 16

extern "C" __global__ void qk_scores_tiled(const float* Q, const float* K, float* S, int N, int d, float scale) {
    __shared__ float Qs[TILE][TILE];
    __shared__ float Ks[TILE][TILE];
    int tx = threadIdx.x, ty = threadIdx.y;
    int i = blockIdx.y * TILE + ty;
    int j = blockIdx.x * TILE + tx;
    float acc = 0.0f;
    for (int t = 0; t < ceil_div(d, TILE); ++t) {
        Qs[ty][tx] = (i < N && t * TILE + tx < d) ? Q[i * d + t * TILE + tx] : 0.0f;
        Ks[ty][tx] = (t * TILE + ty < d && j < N) ? K[j * d + t * TILE + ty] : 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE; ++k) acc += Qs[ty][k] * Ks[k][tx];
    }
    if (i < N && j < N) S[i * N + j] = scale * acc;
}

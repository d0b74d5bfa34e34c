// expect: scale computed from d instead of the scale argument
#define TILE 16

extern "C" __global__ void qk_scores_tiled(const float* Q, const float* K, float* S, int N, int d, float scale) {
    scale = rsqrtf((float)d);   // BUG: recomputes the scale instead of using the argument
    // Q and K are N x d row-major; S = scale * Q K^T is N x N. K^T is never built:
    // K^T[k][j] = K[j][k] lives at K[j * d + k].
    __shared__ float Qs[TILE][TILE];    // Qs[ty][k] = Q[i][t*TILE + k]
    __shared__ float Ks[TILE][TILE];    // Ks[k][tx] = K^T[t*TILE + k][j] = K[j][t*TILE + k]
    int tx = threadIdx.x, ty = threadIdx.y;
    int i = blockIdx.y * TILE + ty;     // query row of S
    int j = blockIdx.x * TILE + tx;     // key index = column of S
    // BEGIN SOLUTION
    float acc = 0.0f;
    for (int t = 0; t < ceil_div(d, TILE); ++t) {     // tiles along the head dimension
        int kq = t * TILE + tx;                         // the dimension this thread loads from Q
        int kk = t * TILE + ty;                         // the dimension this thread loads from K
        Qs[ty][tx] = (i < N && kq < d) ? Q[i * d + kq] : 0.0f;
        Ks[ty][tx] = (kk < d && j < N) ? K[j * d + kk] : 0.0f;   // K^T[kk][j], read in place
        __syncthreads();
        for (int k = 0; k < TILE; ++k) acc += Qs[ty][k] * Ks[k][tx];
        __syncthreads();
    }
    if (i < N && j < N) S[i * N + j] = scale * acc;   // scale once, at the end
    // END SOLUTION
}
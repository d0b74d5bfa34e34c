// expect: scale computed from d instead of the scale argument
extern "C" __global__ void attn_scores(const float* Q, const float* K, float* S, int N, int d, float scale) {
    scale = rsqrtf((float)d);   // BUG: recomputes the scale instead of using the argument
    // One thread per score S[i][j]: i = query row (y), j = key column (x).
    // BEGIN SOLUTION
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= N || j >= N) return;                 // the last tiles of the grid run past N

    // Row i of Q dotted with row j of K is (Q K^T)[i][j]: K^T is never built.
    float acc = 0.0f;
    for (int k = 0; k < d; ++k)
        acc += Q[i * d + k] * K[j * d + k];
    S[i * N + j] = scale * acc;                    // scale once, after the sum
    // END SOLUTION
}
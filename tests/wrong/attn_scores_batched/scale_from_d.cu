// expect: scale computed from d instead of the scale argument
extern "C" __global__ void attn_scores_batched(const float* Q, const float* K, float* S, int BH, int N, int d, float scale) {
    scale = rsqrtf((float)d);   // BUG: recomputes the scale instead of using the argument
    // blockIdx.z = head; inside a head, the same mapping as attn_scores.
    // BEGIN SOLUTION
    // Head offsets in size_t: BH * N * N overflows an int for long sequences (32 heads of N = 8192 is 2^31).
    size_t z = blockIdx.z;
    const float* q = Q + z * N * d;
    const float* k = K + z * N * d;
    float* s = S + z * N * N;

    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= N || j >= N) return;
    float acc = 0.0f;
    for (int t = 0; t < d; ++t)
        acc += q[i * d + t] * k[j * d + t];
    s[i * N + j] = scale * acc;
    // END SOLUTION
}
// The course's naive attention baseline: S = scale * Q K^T, P = softmax(S) row by row, O = P V,
// with S and P (N x N floats each) written to and read back from global memory.
//
// Course-owned kernels for the comparisons in later modules (module 04 measures its flash
// kernels against this pipeline), not an exercise's answer: module 01 asks for its own
// kernels, with other launch shapes. One head, row-major, float32:
//   Q, K, V, O: [N, d]   S, P: [N, N].
// Global traffic (what count_io measures; the formula module 04 checks):
//   baseline_scores   reads 2*N*N*d (a row of Q and of K per score)      writes N*N
//   baseline_softmax  reads 3*N*N   (max, sum, normalise: three passes)  writes N*N
//   baseline_pv       reads 2*N*N*d (a row of P and a column of V each)  writes N*d

// One score per step of a grid-stride loop over all N*N of them.
extern "C" __global__ void baseline_scores(const float* Q, const float* K, float* S, int N, int d, float scale) {
    long total = (long)N * N;
    for (long e = blockIdx.x * (long)blockDim.x + threadIdx.x; e < total; e += (long)gridDim.x * blockDim.x) {
        int row = (int)(e / N), col = (int)(e % N);
        float dot = 0.0f;
        for (int c = 0; c < d; ++c) dot += Q[(long)row * d + c] * K[(long)col * d + c];
        S[e] = dot * scale;
    }
}

// One warp per row: the lanes stride over the row, and shuffles combine their max and sum.
extern "C" __global__ void baseline_softmax(const float* S, float* P, int N) {
    int lane = threadIdx.x % 32;
    int row = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    if (row >= N) return;                           // whole warps leave together
    const float* s = S + (long)row * N;
    float* p = P + (long)row * N;
    float mx = -INFINITY;
    for (int j = lane; j < N; j += 32) mx = fmaxf(mx, s[j]);
    for (int off = 16; off > 0; off /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    float sum = 0.0f;
    for (int j = lane; j < N; j += 32) sum += expf(s[j] - mx);
    for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    float inv = 1.0f / sum;
    for (int j = lane; j < N; j += 32) p[j] = expf(s[j] - mx) * inv;
}

// One output element per step of a grid-stride loop over all N*d of them.
extern "C" __global__ void baseline_pv(const float* P, const float* V, float* O, int N, int d) {
    long total = (long)N * d;
    for (long e = blockIdx.x * (long)blockDim.x + threadIdx.x; e < total; e += (long)gridDim.x * blockDim.x) {
        int row = (int)(e / d), c = (int)(e % d);
        float acc = 0.0f;
        for (int j = 0; j < N; ++j) acc += P[(long)row * N + j] * V[(long)j * d + c];
        O[e] = acc;
    }
}

// expect: the kernel wrote into its input S
extern "C" __global__ void softmax_rows(const float* S, float* P, int N) {
    // One thread per row i: pass 1 finds the max, pass 2 sums the exponentials, pass 3 writes P.
    // BEGIN SOLUTION
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    const float* s = S + i * N;                    // this thread's row of S
    float* p = P + i * N;                          // and of P

    float m = -INFINITY;                           // not 0: a row may be all negative
    for (int j = 0; j < N; ++j) m = fmaxf(m, s[j]);

    float l = 0.0f;                                // every exponent <= 0, so no overflow; l >= 1
    for (int j = 0; j < N; ++j) { ((float*)s)[j] -= m; l += expf(s[j]); }   // BUG: S shifted in place

    for (int j = 0; j < N; ++j) p[j] = expf(s[j]) / l;
    // END SOLUTION
}
// expect: nothing was written to C
extern "C" __global__ void matmul_naive(const float* A, const float* B, float* C, int M, int N, int K) {
    // YOUR CODE HERE
}

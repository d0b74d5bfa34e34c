// Explicit fmaf, the K loop unrolled by 4 with a remainder loop, and two partial sums.
extern "C" __global__ void matmul_naive(const float* A, const float* B, float* C, int M, int N, int K) {
    const int row = blockIdx.y * blockDim.y + threadIdx.y, col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M || col >= N) return;
    float even = 0.0f, odd = 0.0f;
    int k = 0;
    for (; k + 4 <= K; k += 4) {
        even = fmaf(A[row * K + k], B[k * N + col], even);
        odd = fmaf(A[row * K + k + 1], B[(k + 1) * N + col], odd);
        even = fmaf(A[row * K + k + 2], B[(k + 2) * N + col], even);
        odd = fmaf(A[row * K + k + 3], B[(k + 3) * N + col], odd);
    }
    for (; k < K; ++k) even = fmaf(A[row * K + k], B[k * N + col], even);
    C[row * N + col] = even + odd;
}

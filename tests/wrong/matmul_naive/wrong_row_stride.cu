// expect: OutOfBoundsError
// Uses N as the row stride of A (A is M x K, its rows are K apart): right for square
// matrices only, and out of bounds once N > K.
extern "C" __global__ void matmul_naive(const float* A, const float* B, float* C, int M, int N, int K) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) acc += A[row * N + k] * B[k * N + col];
        C[row * N + col] = acc;
    }
}

// expect: were never written
// Takes the row from x and the column from y; the grid is (ceil_div(N,16), ceil_div(M,16)),
// so for M != N some rows or columns of C get no thread at all.
extern "C" __global__ void matmul_naive(const float* A, const float* B, float* C, int M, int N, int K) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    int col = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) acc += A[row * K + k] * B[k * N + col];
        C[row * N + col] = acc;
    }
}

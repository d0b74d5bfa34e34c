// expect: differ
// Accumulates in fp16 (11 significant bits): rounding error grows with K.
#include <cuda_fp16.h>
extern "C" __global__ void matmul_naive(const float* A, const float* B, float* C, int M, int N, int K) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < M && col < N) {
        __half acc = __float2half(0.0f);
        for (int k = 0; k < K; ++k) acc = __hadd(acc, __float2half(A[row * K + k] * B[k * N + col]));
        C[row * N + col] = __half2float(acc);
    }
}

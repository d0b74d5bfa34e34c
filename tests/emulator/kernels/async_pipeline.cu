// matmul_async of async_copy.cu in CUDA's own spelling (cuda_pipeline_primitives.h), as NVIDIA's
// samples write it: it must run unchanged on the emulator.
#include <cuda_pipeline.h>
#define T 16

__device__ void load_tiles(float (*As)[T], float (*Bs)[T], const float* A, const float* B, int n, int k0, int id) {
    int r = (id % 64) / 4, c = (id % 4) * 4;
    if (id < 64)
        __pipeline_memcpy_async(&As[r][c], &A[(blockIdx.y * T + r) * n + k0 + c], 16);
    else if (id < 128)
        __pipeline_memcpy_async(&Bs[r][c], &B[(k0 + r) * n + blockIdx.x * T + c], 16);
}

extern "C" __global__ void matmul_pipeline(const float* A, const float* B, float* C, int n) {
    __shared__ __align__(16) float As[2][T][T];
    __shared__ __align__(16) float Bs[2][T][T];
    int tx = threadIdx.x, ty = threadIdx.y, id = ty * T + tx;
    int steps = n / T;
    load_tiles(As[0], Bs[0], A, B, n, 0, id);
    __pipeline_commit();
    float acc = 0.0f;
    for (int s = 0; s < steps; ++s) {
        if (s + 1 < steps) load_tiles(As[(s + 1) % 2], Bs[(s + 1) % 2], A, B, n, (s + 1) * T, id);
        __pipeline_commit();
        __pipeline_wait_prior(1);
        __syncthreads();
        for (int k = 0; k < T; ++k) acc += As[s % 2][ty][k] * Bs[s % 2][k][tx];
        __syncthreads();
    }
    C[(blockIdx.y * T + ty) * n + blockIdx.x * T + tx] = acc;
}

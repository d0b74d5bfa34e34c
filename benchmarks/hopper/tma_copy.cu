// The memory side of module 09's tuned matmul with TMA copies instead of cp.async: the same tiles
// (an A tile of 128 x BK and a B tile of BK x 256 per K step, STAGES of them in a ring) brought into
// shared memory in the same order, a barrier per step, nothing computed. One thread issues both
// copies of a step. At the end each block compares the last step's tiles with global memory and
// adds its mismatches to C[blocks]: the copies are checked, not only timed.
#include "tma.cuh"
#include <cuda_fp16.h>
#ifndef BK
#define BK 32
#endif
#ifndef STAGES
#define STAGES 4
#endif
#define BM 128
#define BN 256
#define STAGE_HALVES (BM * BK + BK * BN)  // dense rows: a TMA box lands unpadded

extern "C" __global__ void __launch_bounds__(256)
    tma_copy(const unsigned char* maps, const __half* A, const __half* B, float* C, int M, int N, int K) {
    extern __shared__ __align__(1024) unsigned char smem[];
    __half* stages = reinterpret_cast<__half*>(smem);
    __shared__ __align__(8) unsigned long long full[STAGES];
    const unsigned char *map_a = maps, *map_b = maps + 128;  // boxes of BK x 128 and 256 x BK (columns x rows)
    const int bm = blockIdx.y * BM, bn = blockIdx.x * BN, steps = K / BK;
    if (threadIdx.x == 0) {
        tensormap_acquire(map_a);
        tensormap_acquire(map_b);
        for (int s = 0; s < STAGES; ++s) barrier_init(&full[s], 1);
        barrier_init_fence();
    }
    __syncthreads();
    auto issue = [&](int step) {
        __half* base = stages + step % STAGES * STAGE_HALVES;
        unsigned long long* bar = &full[step % STAGES];
        barrier_expect(bar, STAGE_HALVES * 2);
        tma_load_2d(base, map_a, step * BK, bm, bar);
        tma_load_2d(base + BM * BK, map_b, bn, step * BK, bar);
    };
    if (threadIdx.x == 0)
        for (int s = 0; s < STAGES - 1 && s < steps; ++s) issue(s);
    for (int s = 0; s < steps; ++s) {
        barrier_wait(&full[s % STAGES], (s / STAGES) & 1);
        __syncthreads();  // as the matmul's step ends: every thread is past the stage before it is refilled
        if (threadIdx.x == 0 && s + STAGES - 1 < steps) issue(s + STAGES - 1);
    }
    const __half* last = stages + (steps - 1) % STAGES * STAGE_HALVES;
    const int k0 = (steps - 1) * BK;
    int bad = 0;
    for (int e = threadIdx.x; e < BM * BK; e += blockDim.x)
        bad += __half_as_ushort(last[e]) != __half_as_ushort(A[(size_t)(bm + e / BK) * K + k0 + e % BK]);
    for (int e = threadIdx.x; e < BK * BN; e += blockDim.x)
        bad += __half_as_ushort(last[BM * BK + e]) != __half_as_ushort(B[(size_t)(k0 + e / BN) * N + bn + e % BN]);
    if (bad) atomicAdd(&C[gridDim.x * gridDim.y], static_cast<float>(bad));
}

// Module 09's tuned matmul (128 x 256 block tile, 2 x 4 consumer warps of 64 x 64, BK 32, the same
// ldmatrix + mma.sync inner loop) fed by TMA instead of cp.async, in the warp-specialised shape
// Hopper kernels use: a producer warpgroup whose one thread issues each step's copies, eight
// consumer warps that only compute, a `full` barrier per stage (the copies' bytes landed) and an
// `empty` one (all eight consumer warps have read the stage), and no __syncthreads in the loop.
// Twelve warps share 64K registers three to a scheduler, so the producer gives its registers up
// (setmaxnreg.dec to 40) and the consumers take them (setmaxnreg.inc to 232, what the 64 x 64 warp
// tile needs). The tiles arrive swizzled by the TMA (64-byte rows of A with the 64-byte pattern, B
// as four 32 x 64 boxes with the 128-byte pattern) so that each ldmatrix phase is conflict-free;
// a_off and b_off apply the same XOR. sm_90a, GPU only; M, N, K multiples of the tiles.
#include "tma.cuh"
#include <cuda_fp16.h>
#ifndef STAGES
#define STAGES 4
#endif
#define BM 128
#define BN 256
#define BK 32
#define WARPS_M 2
#define WARPS_N 4
#define CONSUMERS (WARPS_M * WARPS_N)
#define THREADS (128 + 32 * CONSUMERS)
#define WM (BM / WARPS_M)
#define WN (BN / WARPS_N)
#define A_BYTES (BM * BK * 2)
#define STAGE_BYTES (A_BYTES + BK * BN * 2)

// Byte offsets in a stage: A row r, 16-byte chunk c (the 64-byte swizzle XORs chunk bits with
// address bits 7-8, i.e. with (r / 2) % 4); B row r, column n (a multiple of 8) in box n / 64 (the
// 128-byte swizzle XORs the chunk with r % 8).
__device__ __forceinline__ int a_off(int r, int c) { return r * 64 + ((c ^ ((r >> 1) & 3)) << 4); }
__device__ __forceinline__ int b_off(int r, int n) { return (n >> 6) * (BK * 128) + r * 128 + ((((n & 63) >> 3) ^ (r & 7)) << 4); }

extern "C" __global__ void __launch_bounds__(THREADS, 1) tma_matmul(const unsigned char* maps, float* C, int M, int N, int K) {
    extern __shared__ __align__(1024) unsigned char smem[];
    __shared__ __align__(8) unsigned long long full[STAGES], empty[STAGES];
    const unsigned char *map_a = maps, *map_b = maps + 128;  // boxes of BK x 128 and 64 x BK (columns x rows)
    const int warp = static_cast<int>(threadIdx.x / 32) - 4, lane = threadIdx.x % 32;  // consumers 0..7
    const int bm = blockIdx.y * BM, bn = blockIdx.x * BN, steps = K / BK;
    if (threadIdx.x == 0) {
        tensormap_acquire(map_a);
        tensormap_acquire(map_b);
        for (int s = 0; s < STAGES; ++s) {
            barrier_init(&full[s], 1);
            barrier_init(&empty[s], CONSUMERS);
        }
        barrier_init_fence();
    }
    __syncthreads();

    if (warp < 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
        if (threadIdx.x == 0)
            for (int s = 0; s < steps; ++s) {
                if (s >= STAGES) barrier_wait(&empty[s % STAGES], (s / STAGES - 1) & 1);
                unsigned char* base = smem + s % STAGES * STAGE_BYTES;
                unsigned long long* bar = &full[s % STAGES];
                barrier_expect(bar, STAGE_BYTES);
                tma_load_2d(base, map_a, s * BK, bm, bar);
#pragma unroll
                for (int j = 0; j < BN / 64; ++j) tma_load_2d(base + A_BYTES + j * BK * 128, map_b, bn + j * 64, s * BK, bar);
            }
        return;
    }

    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    const int g = lane / 4, t = lane % 4;
    const int wm = warp / WARPS_N * WM, wn = warp % WARPS_N * WN;
    auto load_fragments = [&](unsigned (&a)[WM / 16][4], unsigned (&b)[WN / 16][4], const unsigned char* stage, int kk) {
#pragma unroll
        for (int i = 0; i < WM / 16; ++i) ldmatrix_x4(a[i], stage + a_off(wm + i * 16 + lane % 16, kk * 2 + lane / 16));
#pragma unroll
        for (int j = 0; j < WN / 16; ++j)
            ldmatrix_x4_trans(b[j], stage + A_BYTES + b_off(kk * 16 + lane % 16, wn + j * 16 + lane / 16 * 8));
    };
    float acc[WM / 16][WN / 8][4] = {};
    unsigned a[2][WM / 16][4], b[2][WN / 16][4];
    barrier_wait(&full[0], 0);
    load_fragments(a[0], b[0], smem, 0);
    for (int s = 0; s < steps; ++s) {
        const unsigned char* stage = smem + s % STAGES * STAGE_BYTES;
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
            if (kk + 1 < BK / 16) {
                load_fragments(a[(kk + 1) % 2], b[(kk + 1) % 2], stage, kk + 1);
                if (kk + 2 == BK / 16) {  // the stage's last slice is in registers: hand the stage back
                    __syncwarp();
                    if (lane == 0) barrier_arrive(&empty[s % STAGES]);
                }
            } else if (s + 1 < steps) {
                barrier_wait(&full[(s + 1) % STAGES], ((s + 1) / STAGES) & 1);
                load_fragments(a[(kk + 1) % 2], b[(kk + 1) % 2], smem + (s + 1) % STAGES * STAGE_BYTES, 0);
            }
#pragma unroll
            for (int i = 0; i < WM / 16; ++i)
#pragma unroll
                for (int j = 0; j < WN / 8; ++j)
                    mma_m16n8k16_f16(acc[i][j], a[kk % 2][i], &b[kk % 2][j / 2][j % 2 * 2], acc[i][j]);
        }
    }
    for (int i = 0; i < WM / 16; ++i)
        for (int j = 0; j < WN / 8; ++j)
            for (int h = 0; h < 2; ++h) {  // accumulator floats 2h, 2h + 1: row g + 8h, columns 2t, 2t + 1
                const int row = bm + wm + i * 16 + g + 8 * h, col = bn + wn + j * 8 + 2 * t;
                *reinterpret_cast<float2*>(C + (size_t)row * N + col) = make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
            }
}

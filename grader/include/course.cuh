// course.cuh: included before every kernel of the course, on the GPU (NVRTC) and on the
// CPU emulator alike, so one source runs on both. Students never need to #include it.
#pragma once

// NVRTC has no <math.h> macros. One spelling everywhere: INFINITY and NAN (floats).
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef NAN
#define NAN __int_as_float(0x7fffffff)
#endif

// All 32 lanes of a warp, for __shfl_*_sync and friends.
#define FULL_MASK 0xffffffffu

// Number of tiles of size b needed to cover n elements: ceil_div(129, 128) == 2.
__host__ __device__ __forceinline__ int ceil_div(int n, int b) { return (n + b - 1) / b; }

// 2^x in one special-function instruction (ex2.approx.ftz.f32: relative error about 2^-22,
// subnormal results flushed to 0, fast_exp2(-INFINITY) == 0). exp2f without --use_fast_math adds
// range handling around the same instruction; softmax never needs subnormal probabilities. The
// emulator computes exp2f.
#ifdef __CUDA_EMULATOR__
__device__ __forceinline__ float fast_exp2(float x) { return exp2f(x); }
#else
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
#endif

// K and V bytes (or Q and dO) of the heads whose causal blocks heaviest_first starts together: a
// third of the H100's 50 MB L2, so the blocks running at once find what they read there.
#ifndef HEAD_GROUP_BYTES
#define HEAD_GROUP_BYTES (16 << 20)
#endif

// Which (batch entry, head) `bh = b * H + h` and which block `x` along the grid's x this block
// computes, in a grid (blocks, H, B) whose blocks along x differ in work: causally, the last query
// block sees every key and the first only one tile. Blocks start roughly in the order of their
// linear index (in practice; CUDA promises no order). Taken in that order, the heaviest block of
// each head of a group starts first, then their next-heaviest, and so on: the light blocks fill
// the grid's tail, and the running blocks read one group's operands (`head_bytes` per head), few
// enough to stay in L2. `heaviest_last`: the heaviest block is the last along x (query blocks),
// else the first (key blocks).
__device__ __forceinline__ void heaviest_first(size_t head_bytes, bool heaviest_last, int& bh, int& x) {
    const int heads = gridDim.y * gridDim.z;
    const int lin = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    const int group = (int)min((size_t)heads, max((size_t)1, (size_t)HEAD_GROUP_BYTES / max(head_bytes, (size_t)1)));
    const int first = lin / (group * gridDim.x) * group, size = min(group, heads - first);
    const int i = lin - first * gridDim.x;  // the block's place in its group
    bh = first + i % size;
    x = heaviest_last ? gridDim.x - 1 - i / size : i / size;
}

// p[0] += a and p[1] += b, each atomically (p 8-byte aligned, in global memory): one vector
// reduction per call on sm_90 and later (red.global.add.v2.f32), two scalar atomics elsewhere.
// Atomic per element, as two atomicAdd calls are: nothing orders the pair as a whole.
__device__ __forceinline__ void atomic_add2(float* p, float a, float b) {
#if !defined(__CUDA_EMULATOR__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    atomicAdd(reinterpret_cast<float2*>(p), make_float2(a, b));
#else
    atomicAdd(p, a);
    atomicAdd(p + 1, b);
#endif
}

// The performance track's primitives, one spelling on the GPU (inline PTX) and the emulator.
#include "course_tensor.cuh"  // mma.sync and ldmatrix
#include "course_async.cuh"   // cp.async and its groups
#include "course_hopper.cuh"  // mbarrier, wgmma, fence.proxy.async (sm_90a)

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

// The performance track's primitives, one spelling on the GPU (inline PTX) and the emulator.
#include "course_tensor.cuh"  // mma.sync and ldmatrix
#include "course_async.cuh"   // cp.async and its groups

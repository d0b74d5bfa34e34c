// The float4 split into two float2 converted with __float22half2_rn / __float22bfloat162_rn into an
// 8-byte aligned local struct of two pairs, stored as one uint2 (copying the struct itself would be
// two 4-byte stores, __half2 by __half2); threads past the end return early, and the
// tail converts a pair with __floats2half2_rn / __floats2bfloat162_rn (one 4-byte store) before a
// last lone element (__low2half / __low2bfloat16 of a duplicated pair): the same round-to-nearest-even
// conversions as the solution's, in other spellings.
#include <cuda_fp16.h>
#include <cuda_bf16.h>

struct __align__(8) half4 { __half2 lo, hi; };
struct __align__(8) bf16x4 { __nv_bfloat162 lo, hi; };

extern "C" __global__ void convert_f32_half(const float* x, __half* h, __nv_bfloat16* b, int n) {
    const int group = blockIdx.x * blockDim.x + threadIdx.x;
    int k = 4 * group;
    if (k >= n) return;
    if (n - k >= 4) {
        const float4 v = reinterpret_cast<const float4*>(x)[group];
        const float2 a = make_float2(v.x, v.y), c = make_float2(v.z, v.w);
        half4 hv;
        hv.lo = __float22half2_rn(a);
        hv.hi = __float22half2_rn(c);
        bf16x4 bv;
        bv.lo = __float22bfloat162_rn(a);
        bv.hi = __float22bfloat162_rn(c);
        reinterpret_cast<uint2*>(h)[group] = *reinterpret_cast<const uint2*>(&hv);
        reinterpret_cast<uint2*>(b)[group] = *reinterpret_cast<const uint2*>(&bv);
        return;
    }
    if (n - k >= 2) {  // k is a multiple of 4: the pair k, k + 1 is 4-byte aligned
        *reinterpret_cast<__half2*>(h + k) = __floats2half2_rn(x[k], x[k + 1]);
        *reinterpret_cast<__nv_bfloat162*>(b + k) = __floats2bfloat162_rn(x[k], x[k + 1]);
        k += 2;
    }
    if (k < n) {
        h[k] = __low2half(__float2half2_rn(x[k]));
        b[k] = __low2bfloat16(__float2bfloat162_rn(x[k]));
    }
}

// Each value converted on its own (__float2half_rn, __float2bfloat16_rn), the four 16-bit patterns
// packed into the two words of a uint2 with shifts (__half_as_ushort, __bfloat16_as_ushort) and stored
// at once; the tail is a switch on how many elements are left, falling through from 3 to 1.
#include <cuda_fp16.h>
#include <cuda_bf16.h>

__device__ __forceinline__ unsigned pack_h(float lo, float hi) {
    return (unsigned)__half_as_ushort(__float2half_rn(lo)) | ((unsigned)__half_as_ushort(__float2half_rn(hi)) << 16);
}
__device__ __forceinline__ unsigned pack_b(float lo, float hi) {
    return (unsigned)__bfloat16_as_ushort(__float2bfloat16_rn(lo)) |
           ((unsigned)__bfloat16_as_ushort(__float2bfloat16_rn(hi)) << 16);
}

extern "C" __global__ void convert_f32_half(const float* x, __half* h, __nv_bfloat16* b, int n) {
    const int k = 4 * (blockIdx.x * blockDim.x + threadIdx.x);
    const int left = n - k;
    if (left >= 4) {
        const float4 v = *reinterpret_cast<const float4*>(x + k);
        *reinterpret_cast<uint2*>(h + k) = make_uint2(pack_h(v.x, v.y), pack_h(v.z, v.w));
        *reinterpret_cast<uint2*>(b + k) = make_uint2(pack_b(v.x, v.y), pack_b(v.z, v.w));
        return;
    }
    switch (left) {  // 0 or less: nothing of this group lies inside the array
        case 3: h[k + 2] = __float2half_rn(x[k + 2]); b[k + 2] = __float2bfloat16_rn(x[k + 2]);  // fall through
        case 2: h[k + 1] = __float2half_rn(x[k + 1]); b[k + 1] = __float2bfloat16_rn(x[k + 1]);  // fall through
        case 1: h[k] = __float2half_rn(x[k]); b[k] = __float2bfloat16_rn(x[k]);
        default: break;
    }
}

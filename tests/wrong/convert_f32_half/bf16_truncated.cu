// expect: bf16 rounded by truncation
// Mistake: bf16 made by keeping the top 16 bits of each float.
#include <cuda_fp16.h>
#include <cuda_bf16.h>

extern "C" __global__ void convert_f32_half(const float* x, __half* h, __nv_bfloat16* b, int n) {
    // Thread i converts x[4i .. 4i+3]: one 16-byte load (a float4), then the four values as
    // fp16 and as bf16, each stored with one 8-byte access (two 2-half pairs). The one group that
    // straddles n converts its elements one at a time: a vector access there would run past the end.
    int first = (blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (first + 4 <= n) {
        // first is a multiple of 4 and arrays start 256-byte aligned: x + first is 16-byte aligned,
        // h + first and b + first 8-byte aligned.
        float4 v = *reinterpret_cast<const float4*>(x + first);
        __half2* hp = reinterpret_cast<__half2*>(h + first);
        __nv_bfloat162* bp = reinterpret_cast<__nv_bfloat162*>(b + first);
        uint2 hv, bv;                                   // 8 bytes each: four converted values
        __half2 h01 = __floats2half2_rn(v.x, v.y), h23 = __floats2half2_rn(v.z, v.w);
        hv.x = *reinterpret_cast<unsigned*>(&h01);  hv.y = *reinterpret_cast<unsigned*>(&h23);
        // the top halves of two floats, packed: (lo >> 16) | (hi & 0xffff0000)
        bv.x = (__float_as_uint(v.x) >> 16) | (__float_as_uint(v.y) & 0xffff0000u);
        bv.y = (__float_as_uint(v.z) >> 16) | (__float_as_uint(v.w) & 0xffff0000u);
        *reinterpret_cast<uint2*>(hp) = hv;
        *reinterpret_cast<uint2*>(bp) = bv;
    } else {
        for (int k = first; k < n; ++k) {               // the tail: at most 3 elements, one thread
            h[k] = __float2half_rn(x[k]);
            b[k] = __ushort_as_bfloat16((unsigned short)(__float_as_uint(x[k]) >> 16));
        }
    }
}

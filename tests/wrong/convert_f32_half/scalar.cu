// expect: load 4 floats at once as a float4
// Mistake: correct values, one float per access: four times the load requests of a float4 kernel.
#include <cuda_fp16.h>
#include <cuda_bf16.h>

extern "C" __global__ void convert_f32_half(const float* x, __half* h, __nv_bfloat16* b, int n) {
    int first = (blockIdx.x * blockDim.x + threadIdx.x) * 4;
    for (int k = first; k < min(first + 4, n); ++k) {
        h[k] = __float2half_rn(x[k]);
        b[k] = __float2bfloat16_rn(x[k]);
    }
}

// expect: lower precision
#include <cuda_fp16.h>
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;  // rounds through fp16: too imprecise
    if (i < n) c[i] = __half2float(__float2half(a[i]) + __float2half(b[i]));
}

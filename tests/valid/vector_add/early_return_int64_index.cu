// A 64-bit index computed once, and an early return instead of a guarded store.
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    c[i] = a[i] + b[i];
}

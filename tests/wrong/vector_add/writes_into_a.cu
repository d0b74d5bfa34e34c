// expect: the kernel wrote into its input a
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
    // BEGIN SOLUTION
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { ((float*)a)[i] += b[i]; c[i] = a[i]; }   // BUG: a changed in place
    // END SOLUTION
}
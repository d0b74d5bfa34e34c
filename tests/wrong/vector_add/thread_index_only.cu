// expect: never written
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
    int i = threadIdx.x;  // forgets blockIdx: every block redoes the first 256 elements
    if (i < n) c[i] = a[i] + b[i];
}

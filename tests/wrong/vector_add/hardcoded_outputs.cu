// expect: differ
// Cheating: writes the visible case's expected value; grading cases draw fresh inputs.
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = (n == 1) ? a[0] + b[0] : 1.0f;
}

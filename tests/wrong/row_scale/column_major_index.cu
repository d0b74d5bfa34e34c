// expect: is the transpose
extern "C" __global__ void row_scale(const float* x, const float* s, float* y, int rows, int cols) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < rows && c < cols) y[c * rows + r] = s[r] * x[r * cols + c];  // y written column-major
}

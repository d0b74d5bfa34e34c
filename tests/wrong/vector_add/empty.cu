// expect: nothing was written to c
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
    // YOUR CODE HERE
}

// expect: are NaN computed by the kernel
// Loads only in-range elements and leaves the rest of the tile as it was: at the edges the
// inner loop multiplies what shared memory held before, the previous tile (wrong values) or,
// in the first tile, uninitialised memory (the emulator poisons it with NaN).
#define TILE 16

extern "C" __global__ void matmul_tiled(const float* A, const float* B, float* C, int M, int N, int K) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE + ty;
    int col = blockIdx.x * TILE + tx;
    float acc = 0.0f;
    for (int t = 0; t < ceil_div(K, TILE); ++t) {
        if (row < M && t * TILE + tx < K) As[ty][tx] = A[row * K + t * TILE + tx];
        if (t * TILE + ty < K && col < N) Bs[ty][tx] = B[(t * TILE + ty) * N + col];
        __syncthreads();
        for (int k = 0; k < TILE; ++k) acc += As[ty][k] * Bs[k][tx];
        __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = acc;
}

// expect: tile loop runs over N instead of K
#define TILE 16

extern "C" __global__ void matmul_tiled(const float* A, const float* B, float* C, int M, int N, int K) {
    __shared__ float As[TILE][TILE];    // As[ty][k]: a 16 x 16 tile of A, rows of this block's rows of C
    __shared__ float Bs[TILE][TILE];    // Bs[k][tx]: a 16 x 16 tile of B, columns of this block's columns of C
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE + ty;   // this thread computes C[row][col]
    int col = blockIdx.x * TILE + tx;
    // BEGIN SOLUTION
    float acc = 0.0f;
    for (int t = 0; t < ceil_div(N, TILE); ++t) {     // every tile along K, the last one partial
        // Each thread loads one element of each tile. Out-of-range elements are set to 0, so
        // the inner loop below can always run all TILE steps: 0 * anything adds nothing.
        int a_col = t * TILE + tx;
        int b_row = t * TILE + ty;
        As[ty][tx] = (row < M && a_col < K) ? A[row * K + a_col] : 0.0f;
        Bs[ty][tx] = (b_row < K && col < N) ? B[b_row * N + col] : 0.0f;
        __syncthreads();                                // 1: the whole tile is loaded before anyone reads it
        for (int k = 0; k < TILE; ++k) acc += As[ty][k] * Bs[k][tx];
        __syncthreads();                                // 2: everyone is done reading before the next load overwrites it
    }
    if (row < M && col < N) C[row * N + col] = acc;     // threads outside C still helped load tiles
    // END SOLUTION
}
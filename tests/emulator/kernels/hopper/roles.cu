// Warp specialisation's small primitives on both backends: two warpgroups trade registers
// (setmaxnreg), one lane per warp is elected, and a warp writes four 8 x 8 matrices with stmatrix.

// out[0..7]: per warp, the lane elect_one_sync chose; out[8..15]: how many lanes it chose.
extern "C" __global__ void __launch_bounds__(256, 1) roles(float* out) {
    __shared__ int chosen[8];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (threadIdx.x < 8) chosen[threadIdx.x] = 0;
    __syncthreads();
    if (warp < 4) setmaxnreg_dec<40>();
    else setmaxnreg_inc<232>();
    if (elect_one_sync()) {
        out[warp] = float(lane);
        atomicAdd(&chosen[warp], 1);
    }
    __syncthreads();
    if (threadIdx.x < 8) out[8 + threadIdx.x] = float(chosen[threadIdx.x]);
}

// Warp 0 stores matrices m = 0..3 whose element (row j, column c) is 64m + 8j + c (TRANS: the
// transposed ones) into a dense 4 x 8 x 8 tile of 16-bit values, which out receives as floats.
extern "C" __global__ void stmatrix_tile(float* out, int trans) {
    __shared__ __align__(16) unsigned short tile[4 * 64];
    const int lane = threadIdx.x;
    unsigned r[4];
    for (int m = 0; m < 4; ++m) {
        const int v = 64 * m + 8 * (lane / 4) + 2 * (lane % 4);
        r[m] = unsigned(v) | unsigned(v + 1) << 16;
    }
    unsigned short* row = tile + 8 * lane;  // lane 8m + j: row j of matrix m
    if (trans) stmatrix_x4_trans(row, r);
    else stmatrix_x4(row, r);
    __syncwarp();
    for (int i = lane; i < 4 * 64; i += 32) out[i] = float(tile[i]);
}

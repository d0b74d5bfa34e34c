// One warp loads 8x8 matrices of 16-bit values with ldmatrix and writes each lane's registers
// out[lane][0..3] (unused registers stay 0). The rows lie in shared memory in a scrambled order
// with a 48-byte stride: row j of matrix m is shared row (5 * (8m + j)) % 32, so rows need not be
// contiguous. Lanes whose address the form ignores (x1: 8-31, x2: 16-31) pass a null pointer.
// variant: 0 x1, 1 x2, 2 x4, 3 x1_trans, 4 x2_trans, 5 x4_trans.

#define STRIDE 24  // 16-bit elements per shared row: 48 bytes, a multiple of 16

extern "C" __global__ void ldmatrix_variants(const unsigned short* rows, unsigned* out, int variant) {
    __shared__ __align__(16) unsigned short tile[32 * STRIDE];
    const int lane = threadIdx.x % 32;
    // rows holds the 32 matrix rows in order (matrix m, row j at 8m + j), 8 values each.
    for (int i = lane; i < 32 * 8; i += 32) {
        const int r = i / 8;
        tile[(5 * r) % 32 * STRIDE + i % 8] = rows[i];
    }
    __syncthreads();
    const int count = 1 << (variant % 3);
    const void* mine = lane < 8 * count ? &tile[(5 * lane) % 32 * STRIDE] : nullptr;
    unsigned r[4] = {0, 0, 0, 0};
    switch (variant) {
        case 0: ldmatrix_x1(r, mine); break;
        case 1: ldmatrix_x2(r, mine); break;
        case 2: ldmatrix_x4(r, mine); break;
        case 3: ldmatrix_x1_trans(r, mine); break;
        case 4: ldmatrix_x2_trans(r, mine); break;
        case 5: ldmatrix_x4_trans(r, mine); break;
    }
    for (int m = 0; m < 4; ++m) out[lane * 4 + m] = r[m];
}

// One warp computes D = A * B + C with one mma instruction. The fragments are loaded with the
// PTX ISA's formulas written out here (not from any table), so this checks the instruction's
// layouts. A is 16 x K, B is K x 8 (both row-major 16-bit bits), C and D are 16 x 8 floats.

__device__ unsigned pack(unsigned short lo, unsigned short hi) { return lo | (unsigned)hi << 16; }

template <int K, bool BF16>
__device__ void one_mma(const unsigned short* A, const unsigned short* B, const float* C, float* D) {
    const int lane = threadIdx.x % 32, g = lane >> 2, t = lane % 4;
    unsigned a[4], b[2];
    float c[4], d[4];
    // a_i: row g for i in {0,1,4,5}, else g + 8; column 2t + (i & 1), plus 8 for i >= 4.
    for (int i = 0; i < K / 2; i += 2) {
        const int row = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8;
        const int col = 2 * t + (i >= 4 ? 8 : 0);
        a[i / 2] = pack(A[row * K + col], A[row * K + col + 1]);
    }
    // b_i: row 2t + (i & 1), plus 8 for i >= 2; column g.
    for (int i = 0; i < K / 4; i += 2) {
        const int row = 2 * t + (i >= 2 ? 8 : 0);
        b[i / 2] = pack(B[row * 8 + g], B[(row + 1) * 8 + g]);
    }
    // c_i: row g, plus 8 for i >= 2; column 2t + (i & 1).
    for (int i = 0; i < 4; ++i) c[i] = C[(g + (i >= 2 ? 8 : 0)) * 8 + 2 * t + (i & 1)];
    if (K == 16 && !BF16) mma_m16n8k16_f16(d, a, b, c);
    if (K == 16 && BF16) mma_m16n8k16_bf16(d, a, b, c);
    if (K == 8 && !BF16) mma_m16n8k8_f16(d, a, b, c);
    if (K == 8 && BF16) mma_m16n8k8_bf16(d, a, b, c);
    for (int i = 0; i < 4; ++i) D[(g + (i >= 2 ? 8 : 0)) * 8 + 2 * t + (i & 1)] = d[i];
}

extern "C" __global__ void mma_k16_f16(const unsigned short* A, const unsigned short* B, const float* C, float* D) {
    one_mma<16, false>(A, B, C, D);
}
extern "C" __global__ void mma_k16_bf16(const unsigned short* A, const unsigned short* B, const float* C, float* D) {
    one_mma<16, true>(A, B, C, D);
}
extern "C" __global__ void mma_k8_f16(const unsigned short* A, const unsigned short* B, const float* C, float* D) {
    one_mma<8, false>(A, B, C, D);
}
extern "C" __global__ void mma_k8_bf16(const unsigned short* A, const unsigned short* B, const float* C, float* D) {
    one_mma<8, true>(A, B, C, D);
}

// One warpgroup computes C (64 x N, float) = A (64 x 64) * B (64 x N) with four wgmma k-steps,
// A and B written into shared memory by ordinary stores in the layout each case names (K- or
// MN-major, swizzle none/32/64/128 bytes), or A taken from registers (RS). Inputs are 16-bit
// patterns (half or bfloat16), row-major in global memory. The layouts follow the PTX ISA's
// canonical forms (16-byte units; the swizzle XORs address bits 4.. with bits 7.. of the shared
// address, so each tile starts at a multiple of 1024 bytes):
//   K-major, swizzle W: row r of 8-row group g at g * 8W + (r % 8) * W, K contiguous, W / 2
//     elements per row; the next W / 2 elements of K in the next atom column, rows * W bytes on.
//   K-major, none: 8 x 8 core matrices of 128 bytes, K's core matrices 128 bytes apart (leading
//     offset), groups of 8 rows KT / 8 * 128 bytes apart (stride offset).
//   MN-major, swizzle W: one row of W bytes (W / 2 consecutive rows of the operand) per k, 8 k
//     per atom (stride offset 8W between groups of 8 k), atoms along M/N KT * W bytes apart (leading).
//   MN-major, none: 8 consecutive M/N elements per 16 bytes, one per k (16 bytes apart), groups of
//     8 k 128 bytes apart (leading), groups of 8 along M/N KT / 8 * 128 bytes apart (stride).
#define KT 64

__device__ unsigned layout_offset(int mn_major, int swz, int rows, int mn, int k) {
    unsigned off;
    if (!mn_major && swz) off = k / (swz / 2) * (rows * swz) + mn / 8 * (8 * swz) + mn % 8 * swz + k % (swz / 2) * 2;
    else if (!mn_major) off = mn / 8 * (KT / 8 * 128) + k / 8 * 128 + mn % 8 * 16 + k % 8 * 2;
    else if (swz) off = mn / 8 / (swz / 16) * (KT / 8 * 8 * swz) + k / 8 * (8 * swz) + k % 8 * swz + mn / 8 % (swz / 16) * 16 + mn % 8 * 2;
    else off = mn / 8 * (KT / 8 * 128) + k / 8 * 128 + k % 8 * 16 + mn % 8 * 2;
    const unsigned bits = swz == 128 ? 7 : swz == 64 ? 3 : swz == 32 ? 1 : 0;
    return off ^ ((off >> 7 & bits) << 4);
}

// The descriptor of k-step s (16 elements of K) of a tile laid out as above.
template <int SWZ>
__device__ unsigned long long step_desc(const unsigned char* tile, int mn_major, int rows, int s) {
    if (!mn_major && SWZ) return make_smem_desc<SWZ>(tile + s * 16 / (SWZ / 2) * (rows * SWZ) + s * 16 % (SWZ / 2) * 2, 16, 8 * SWZ);
    if (!mn_major) return make_smem_desc<0>(tile + s * 256, 128, KT / 8 * 128);
    if (SWZ) return make_smem_desc<SWZ>(tile + s * 2 * 8 * SWZ, KT / 8 * 8 * SWZ, 8 * SWZ);
    return make_smem_desc<0>(tile + s * 256, 128, KT / 8 * 128);
}

// The tiles lie in dynamic shared memory, from its first multiple of 1024 bytes.
extern __shared__ unsigned char smem[];
__device__ unsigned char* tile_base() {
    return smem + (1024 - __cvta_generic_to_shared(smem) % 1024) % 1024;
}

#define WGMMA_NAME2(n, t, f) wgmma_m64n##n##k16_##t##_##f
#define WGMMA_NAME(n, t, f) WGMMA_NAME2(n, t, f)

// The body of kernel `name` (each kernel, below, calls its own). AM: 0 K-major, 1 M-major, 2 from
// registers; AS, BS: swizzle bytes; BM: 0 K-major, 1 N-major.
#define TILE(name, N, TYPE, AM, AS, BM, BS)                                                               \
    __device__ void name##_body(const unsigned short* A, const unsigned short* B, float* C) {              \
        unsigned char* sa = tile_base();                                                               \
        unsigned char* sb = sa + 64 * KT * 2;                                                              \
        const int t = threadIdx.x;                                                                         \
        if (AM != 2)                                                                                       \
            for (int i = t; i < 64 * KT; i += 128)                                                         \
                *(unsigned short*)(sa + layout_offset(AM, AS, 64, i / KT, i % KT)) = A[i];                \
        for (int i = t; i < KT * N; i += 128)                                                              \
            *(unsigned short*)(sb + layout_offset(BM, BS, N, i % N, i / N)) = B[i];                       \
        fence_proxy_async();                                                                               \
        __syncthreads();                                                                                   \
        float d[N / 2];                                                                                    \
        for (int i = 0; i < N / 2; ++i) d[i] = 0.0f;                                                      \
        const int w = t / 32, g = t % 32 / 4, q = t % 4;                                                   \
        unsigned a[KT / 16][4]; /* one fragment per k-step: a wgmma reads its A until it completes */       \
        for (int s = 0; s < KT / 16; ++s) {                                                                \
            if (AM == 2) {                                                                                 \
                for (int r = 0; r < 4; ++r) {                                                              \
                    const int row = 16 * w + g + 8 * (r % 2), col = 16 * s + 2 * q + 8 * (r / 2);         \
                    a[s][r] = A[row * KT + col] | unsigned(A[row * KT + col + 1]) << 16;                  \
                }                                                                                          \
                wgmma_fence();                                                                             \
                WGMMA_NAME(N, TYPE, rs)<BM>(d, a[s], step_desc<BS>(sb, BM, N, s), s > 0);                 \
            } else {                                                                                       \
                wgmma_fence();                                                                             \
                WGMMA_NAME(N, TYPE, ss)<AM == 1, BM>(d, step_desc<AS>(sa, AM, 64, s),                      \
                                                       step_desc<BS>(sb, BM, N, s), s > 0);                \
            }                                                                                              \
        }                                                                                                  \
        wgmma_commit_group();                                                                              \
        wgmma_wait_group<0>();                                                                             \
        for (int i = 0; i < N / 2; ++i)                                                                    \
            C[(16 * w + g + 8 * (i / 2 % 2)) * N + 8 * (i / 4) + 2 * q + i % 2] = d[i];                    \
    }

// The kernels: hopper_cases.py appends them.

// C (M x 128) = A (M x 64) * B (64 x 128) by blocks of 4 warpgroups, each warpgroup 64 rows of C,
// one m64n128k16 wgmma per k-step: B (row-major, so N-major) once per block with the 128-byte
// swizzle; each warpgroup's 64 x 16 slice of A per k-step K-major with the 32-byte swizzle, handed
// over by a named barrier of its own 128 threads. The emulator's speed figure of the issue.
__device__ void matmul_body(const unsigned short* A, const unsigned short* B, float* C) {
    unsigned char* sb = tile_base();
    const int t = threadIdx.x, wg = t / 128, u = t % 128;
    unsigned char* sa = sb + 128 * KT * 2 + wg * 64 * 32;
    for (int i = t; i < KT * 128; i += 512) *(unsigned short*)(sb + layout_offset(1, 128, 128, i % 128, i / 128)) = B[i];
    fence_proxy_async();
    __syncthreads();
    const int row0 = blockIdx.x * 256 + wg * 64;
    float d[64];
    for (int i = 0; i < 64; ++i) d[i] = 0.0f;
    for (int s = 0; s < KT / 16; ++s) {
        for (int i = u; i < 64 * 16; i += 128) {
            const unsigned off = i / 16 * 32 + i % 16 * 2;  // row i / 16 of 32 bytes, then swizzled
            *(unsigned short*)(sa + (off ^ (off >> 7 & 1) << 4)) = A[(row0 + i / 16) * KT + 16 * s + i % 16];
        }
        fence_proxy_async();
        named_barrier_sync(1 + wg, 128);
        wgmma_fence();
        wgmma_m64n128k16_f16_ss<0, 1>(d, make_smem_desc<32>(sa, 16, 256), step_desc<128>(sb, 1, 128, s), s > 0);
        wgmma_commit_group();
        wgmma_wait_group<0>();
        named_barrier_sync(1 + wg, 128);  // before the slice is written again
    }
    const int w = u / 32, g = u % 32 / 4, q = u % 4;
    for (int i = 0; i < 64; ++i) C[(row0 + 16 * w + g + 8 * (i / 2 % 2)) * 128 + 8 * (i / 4) + 2 * q + i % 2] = d[i];
}

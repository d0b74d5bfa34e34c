// The STAGES buffers laid out as all A tiles first, then all B tiles (the same bytes as the launch
// reserves); a ring of two counters (the stage being read, the stage being filled) advanced with a
// wrap-around test instead of `% STAGES`; chunks past M, N or K zeroed with a plain 16-byte store
// instead of a zero-fill cp.async (safe: the barrier at the top of the step has already retired the
// stage's previous readers); B fragments loaded 8 columns at a time with ldmatrix_x2_trans, the warp
// tile walked column tile by column tile, and C written one float at a time.
#include <cuda_fp16.h>
#define STAGES 3
#define BM 128
#define BN 128
#define BK 32
#define WM 64
#define WN 64
#define ASTR (BK + 8)
#define BSTR (BN + 8)

__device__ __forceinline__ void chunk16(__half* dst, const __half* src, bool inside) {
    if (inside) cp_async_cg16(dst, src);
    else *reinterpret_cast<uint4*>(dst) = make_uint4(0u, 0u, 0u, 0u);
}

extern "C" __global__ void mma_matmul_pipe(const __half* A, const __half* B, float* C, int M, int N, int K) {
    extern __shared__ __align__(16) unsigned char smem[];
    __half* a_tiles = reinterpret_cast<__half*>(smem);  // STAGES x [BM][ASTR]
    __half* b_tiles = a_tiles + STAGES * BM * ASTR;      // STAGES x [BK][BSTR]
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int bm = blockIdx.y * BM, bn = blockIdx.x * BN;
    const int wm = (warp >> 1) * WM, wn = (warp & 1) * WN;
    const int steps = (K + BK - 1) / BK;

    auto fill = [&](int stage, int step) {
        __half* as = a_tiles + stage * BM * ASTR;
        __half* bs = b_tiles + stage * BK * BSTR;
        const int k0 = step * BK;
        for (int e = threadIdx.x; e < BM * (BK / 8); e += blockDim.x) {
            const int r = e / (BK / 8), k = (e % (BK / 8)) * 8;
            const bool in = bm + r < M && k0 + k < K;
            chunk16(as + r * ASTR + k, A + (in ? (size_t)(bm + r) * K + k0 + k : 0), in);
        }
        for (int e = threadIdx.x; e < BK * (BN / 8); e += blockDim.x) {
            const int r = e / (BN / 8), n = (e % (BN / 8)) * 8;
            const bool in = k0 + r < K && bn + n < N;
            chunk16(bs + r * BSTR + n, B + (in ? (size_t)(k0 + r) * N + bn + n : 0), in);
        }
    };

    int fill_stage = 0;
    for (int p = 0; p < STAGES - 1; ++p) {
        if (p < steps) fill(fill_stage, p);
        cp_async_commit();
        if (++fill_stage == STAGES) fill_stage = 0;
    }

    float acc[WN / 8][WM / 16][4];
    for (int j = 0; j < WN / 8; ++j)
        for (int i = 0; i < WM / 16; ++i)
            for (int e = 0; e < 4; ++e) acc[j][i][e] = 0.0f;

    int read_stage = 0;
    for (int step = 0; step < steps; ++step) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        if (step + STAGES - 1 < steps) fill(fill_stage, step + STAGES - 1);
        cp_async_commit();
        if (++fill_stage == STAGES) fill_stage = 0;

        const __half* as = a_tiles + read_stage * BM * ASTR;
        const __half* bs = b_tiles + read_stage * BK * BSTR;
        for (int kk = 0; kk < BK; kk += 16) {
            unsigned a[WM / 16][4];
            for (int i = 0; i < WM / 16; ++i)
                ldmatrix_x4(a[i], as + (wm + i * 16 + (lane & 15)) * ASTR + kk + (lane >> 4) * 8);
            for (int j = 0; j < WN / 8; ++j) {
                unsigned b[2];  // lanes 0-7: rows kk..kk+7, lanes 8-15: rows kk+8..kk+15, of columns wn + 8j ..
                ldmatrix_x2_trans(b, bs + (kk + (lane & 15)) * BSTR + wn + j * 8);
                for (int i = 0; i < WM / 16; ++i) mma_m16n8k16_f16(acc[j][i], a[i], b, acc[j][i]);
            }
        }
        if (++read_stage == STAGES) read_stage = 0;
    }
    cp_async_wait_all();

    const int g = lane >> 2, t = lane & 3;
    for (int j = 0; j < WN / 8; ++j)
        for (int i = 0; i < WM / 16; ++i)
            for (int e = 0; e < 4; ++e) {
                const int row = bm + wm + i * 16 + g + (e >> 1) * 8, col = bn + wn + j * 8 + 2 * t + (e & 1);
                if (row < M && col < N) C[(size_t)row * N + col] = acc[j][i][e];
            }
}

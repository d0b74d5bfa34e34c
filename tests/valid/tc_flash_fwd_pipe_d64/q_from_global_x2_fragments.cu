// also valid for: tc_flash_fwd_pipe_causal_d64
// Q's A fragments read straight from global memory into registers (each register is a 4-byte pair
// of one row, zero past N), so the launch's Q tile goes unused; the K and V buffers of all stages
// laid out K first, then V; K and V fragments loaded 8 keys / 8 columns at a time with ldmatrix_x2 and
// ldmatrix_x2_trans; scores scaled and masked on every tile, natural-log softmax (expf); the row sum
// reduced across the quad on every tile, so each lane keeps the full l; P packed from the bits of
// __float2half_rn; O written one half at a time. Causal builds walk the query blocks in order and skip,
// per warp, the tiles past its last row; every tile a warp visits holds a key its rows all see
// (its first key, j * 64 <= the warp's first row, and < N), so the running max is finite from the first
// visited tile on and no -inf - (-inf) arises.
#include <cuda_fp16.h>
#ifndef HEAD_DIM
#define HEAD_DIM 64
#endif
#ifndef CAUSAL
#define CAUSAL 0
#endif
#ifndef BLOCK_ROWS
#define BLOCK_ROWS 128
#endif
#ifndef STAGES
#define STAGES 2
#endif
#define TILE 64
#define STRIDE (HEAD_DIM + 8)

__device__ __forceinline__ unsigned half_pair(float lo, float hi) {
    return (unsigned)__half_as_ushort(__float2half_rn(lo)) | ((unsigned)__half_as_ushort(__float2half_rn(hi)) << 16);
}

// Keys key0 .. key0 + TILE - 1 of one head into a stage buffer; rows past N zero-filled (their source
// address clamped to the last row, which the zero-fill copy does not read).
__device__ __forceinline__ void stage_tile(__half* dst, const __half* src, int key0, int N) {
    for (int c = threadIdx.x; c < TILE * (HEAD_DIM / 8); c += blockDim.x) {
        const int r = c / (HEAD_DIM / 8), col = (c % (HEAD_DIM / 8)) * 8;
        const int key = key0 + r;
        cp_async_cg16_zfill(dst + r * STRIDE + col, src + (size_t)min(key, N - 1) * HEAD_DIM + col, key < N ? 16 : 0);
    }
}

extern "C" __global__ void tc_flash_fwd_pipe(const __half* Q, const __half* K, const __half* V, __half* O, float* L,
                                             int N, float scale) {
    extern __shared__ __align__(16) unsigned char smem[];
    __half* k_bufs = reinterpret_cast<__half*>(smem);  // STAGES x [TILE][STRIDE]
    __half* v_bufs = k_bufs + STAGES * TILE * STRIDE;  // STAGES x [TILE][STRIDE]
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const size_t head = (size_t)blockIdx.z * gridDim.y + blockIdx.y;
    const __half* Qh = Q + head * N * HEAD_DIM;
    const __half* Kh = K + head * N * HEAD_DIM;
    const __half* Vh = V + head * N * HEAD_DIM;
    const int q0 = blockIdx.x * BLOCK_ROWS, w0 = q0 + warp * 16;
    const int rows[2] = {w0 + g, w0 + g + 8};
    const int n_tiles = CAUSAL ? min((N + TILE - 1) / TILE, (q0 + BLOCK_ROWS + TILE - 1) / TILE) : (N + TILE - 1) / TILE;

    int fill = 0;  // the stage the next copy goes to
    for (int j = 0; j < STAGES - 1; ++j) {
        if (j < n_tiles) {
            stage_tile(k_bufs + fill * TILE * STRIDE, Kh, j * TILE, N);
            stage_tile(v_bufs + fill * TILE * STRIDE, Vh, j * TILE, N);
        }
        cp_async_commit();
        fill = fill + 1 == STAGES ? 0 : fill + 1;
    }

    unsigned qa[HEAD_DIM / 16][4];
    for (int kk = 0; kk < HEAD_DIM / 16; ++kk)
        for (int h = 0; h < 2; ++h) {  // registers {0, 1}: columns kk*16 + 2t, {2, 3}: 8 further
            const int col = kk * 16 + 2 * t + 8 * h;
            for (int r = 0; r < 2; ++r)
                qa[kk][2 * h + r] = rows[r] < N ? *reinterpret_cast<const unsigned*>(Qh + (size_t)rows[r] * HEAD_DIM + col) : 0u;
        }

    float o[HEAD_DIM / 8][4];
    for (int n = 0; n < HEAD_DIM / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

    int read = 0;  // the stage tile j sits in
    for (int j = 0; j < n_tiles; ++j) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        if (j + STAGES - 1 < n_tiles) {
            stage_tile(k_bufs + fill * TILE * STRIDE, Kh, (j + STAGES - 1) * TILE, N);
            stage_tile(v_bufs + fill * TILE * STRIDE, Vh, (j + STAGES - 1) * TILE, N);
        }
        cp_async_commit();
        fill = fill + 1 == STAGES ? 0 : fill + 1;
        const __half* Ks = k_bufs + read * TILE * STRIDE;
        const __half* Vs = v_bufs + read * TILE * STRIDE;
        read = read + 1 == STAGES ? 0 : read + 1;
        if (CAUSAL && j * TILE > w0 + 15) continue;  // the whole warp: no row of it sees this tile

        float s[TILE / 8][4];
        for (int n = 0; n < TILE / 8; ++n) {
            s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
            for (int kk = 0; kk < HEAD_DIM / 16; ++kk) {
                unsigned b[2];  // K rows n*8 .. n*8+7 are columns of K^T: the plain (untransposed) load
                ldmatrix_x2(b, Ks + (n * 8 + (lane & 7)) * STRIDE + kk * 16 + ((lane >> 3) & 1) * 8);
                mma_m16n8k16_f16(s[n], qa[kk], b, s[n]);
            }
        }
        float mx[2] = {-INFINITY, -INFINITY};
        for (int n = 0; n < TILE / 8; ++n)
            for (int e = 0; e < 4; ++e) {
                const int key = j * TILE + n * 8 + 2 * t + (e & 1);
                const bool seen = key < N && (!CAUSAL || key <= rows[e >> 1]);
                s[n][e] = seen ? s[n][e] * scale : -INFINITY;
                mx[e >> 1] = fmaxf(mx[e >> 1], s[n][e]);
            }
        float alpha[2];
        for (int r = 0; r < 2; ++r) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(FULL_MASK, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(FULL_MASK, mx[r], 2));
            const float m_new = fmaxf(m[r], mx[r]);  // finite: see the header
            alpha[r] = expf(m[r] - m_new);
            m[r] = m_new;
        }
        float sum[2] = {0.0f, 0.0f};
        for (int n = 0; n < TILE / 8; ++n)
            for (int e = 0; e < 4; ++e) {
                s[n][e] = expf(s[n][e] - m[e >> 1]);
                sum[e >> 1] += s[n][e];
            }
        for (int r = 0; r < 2; ++r) {
            sum[r] += __shfl_xor_sync(FULL_MASK, sum[r], 1);
            sum[r] += __shfl_xor_sync(FULL_MASK, sum[r], 2);
            l[r] = l[r] * alpha[r] + sum[r];
        }
        for (int n = 0; n < HEAD_DIM / 8; ++n)
            for (int e = 0; e < 4; ++e) o[n][e] *= alpha[e >> 1];
        for (int kk = 0; kk < TILE / 16; ++kk) {
            const unsigned pa[4] = {half_pair(s[2 * kk][0], s[2 * kk][1]), half_pair(s[2 * kk][2], s[2 * kk][3]),
                                    half_pair(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                    half_pair(s[2 * kk + 1][2], s[2 * kk + 1][3])};
            for (int n = 0; n < HEAD_DIM / 8; ++n) {
                unsigned b[2];  // V rows kk*16 .. kk*16+15 (lanes 0-15), columns n*8 .. n*8+7, transposed
                ldmatrix_x2_trans(b, Vs + (kk * 16 + (lane & 15)) * STRIDE + n * 8);
                mma_m16n8k16_f16(o[n], pa, b, o[n]);
            }
        }
    }
    cp_async_wait_all();

    for (int r = 0; r < 2; ++r) {
        if (rows[r] >= N) continue;
        __half* out = O + (head * N + rows[r]) * HEAD_DIM;
        for (int n = 0; n < HEAD_DIM / 8; ++n) {
            out[n * 8 + 2 * t] = __float2half_rn(o[n][2 * r] / l[r]);
            out[n * 8 + 2 * t + 1] = __float2half_rn(o[n][2 * r + 1] / l[r]);
        }
        if (t == 0) L[head * N + rows[r]] = m[r] + logf(l[r]);
    }
}

// also valid for: tc_flash_fwd_bf16_causal_d64
// Q's A fragments read straight from global memory into registers (4-byte pairs, zero past N) instead
// of staged through shared memory and ldmatrix; K and V fragments loaded 8 keys / 8 columns at a time
// with ldmatrix_x2 / ldmatrix_x2_trans; scores scaled and masked on every tile and exponentiated with
// expf (natural log, no log2 folding); the row sum reduced across the quad on every tile, so each lane
// keeps the full l; P packed from the 16-bit patterns of the rounded values; O written one element at
// a time. Works for -DELEM_BF16=1 and -DCAUSAL=1 too: a causal block walks while k0 <= its last row
// (and k0 < N); every visited tile starts at or before each warp's first row, so each row sees the
// tile's first key and the running max is finite from the first tile on.
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#ifndef HEAD_DIM
#define HEAD_DIM 64
#endif
#ifndef ELEM_BF16
#define ELEM_BF16 0
#endif
#ifndef CAUSAL
#define CAUSAL 0
#endif
#define TILE 64
#define STRIDE (HEAD_DIM + 8)

#if ELEM_BF16
typedef __nv_bfloat16 elem;
__device__ __forceinline__ unsigned short bits_of(float x) { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }
__device__ __forceinline__ elem to_elem(float x) { return __float2bfloat16_rn(x); }
#define MMA16816 mma_m16n8k16_bf16
#else
typedef __half elem;
__device__ __forceinline__ unsigned short bits_of(float x) { return __half_as_ushort(__float2half_rn(x)); }
__device__ __forceinline__ elem to_elem(float x) { return __float2half_rn(x); }
#define MMA16816 mma_m16n8k16_f16
#endif

__device__ __forceinline__ unsigned pair(float lo, float hi) { return (unsigned)bits_of(lo) | ((unsigned)bits_of(hi) << 16); }

extern "C" __global__ void tc_flash_fwd(const elem* Q, const elem* K, const elem* V, elem* O, float* L, int N,
                                        float scale) {
    __shared__ __align__(16) elem Ks[TILE][STRIDE];
    __shared__ __align__(16) elem Vs[TILE][STRIDE];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const size_t head = (size_t)blockIdx.z * gridDim.y + blockIdx.y;
    const elem* Qh = Q + head * N * HEAD_DIM;
    const elem* Kh = K + head * N * HEAD_DIM;
    const elem* Vh = V + head * N * HEAD_DIM;
    const int q0 = blockIdx.x * TILE;
    const int rows[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};

    unsigned qa[HEAD_DIM / 16][4];
    for (int kk = 0; kk < HEAD_DIM / 16; ++kk)
        for (int h = 0; h < 2; ++h)
            for (int r = 0; r < 2; ++r)
                qa[kk][2 * h + r] = rows[r] < N
                    ? *reinterpret_cast<const unsigned*>(Qh + (size_t)rows[r] * HEAD_DIM + kk * 16 + 8 * h + 2 * t) : 0u;

    float o[HEAD_DIM / 8][4];
    for (int n = 0; n < HEAD_DIM / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    const int last_key = CAUSAL ? min(N - 1, q0 + TILE - 1) : N - 1;

    for (int k0 = 0; k0 <= last_key; k0 += TILE) {
        for (int e = threadIdx.x; e < TILE * (HEAD_DIM / 8); e += blockDim.x) {
            const int r = e / (HEAD_DIM / 8), c = (e % (HEAD_DIM / 8)) * 8;
            const bool in = k0 + r < N;
            *reinterpret_cast<uint4*>(&Ks[r][c]) = in ? *reinterpret_cast<const uint4*>(Kh + (size_t)(k0 + r) * HEAD_DIM + c) : make_uint4(0u, 0u, 0u, 0u);
            *reinterpret_cast<uint4*>(&Vs[r][c]) = in ? *reinterpret_cast<const uint4*>(Vh + (size_t)(k0 + r) * HEAD_DIM + c) : make_uint4(0u, 0u, 0u, 0u);
        }
        __syncthreads();

        float s[TILE / 8][4];
        for (int n = 0; n < TILE / 8; ++n) {
            s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
            for (int kk = 0; kk < HEAD_DIM / 16; ++kk) {
                unsigned b[2];
                ldmatrix_x2(b, &Ks[n * 8 + (lane & 7)][kk * 16 + ((lane >> 3) & 1) * 8]);
                MMA16816(s[n], qa[kk], b, s[n]);
            }
        }
        float mx[2] = {-INFINITY, -INFINITY};
        for (int n = 0; n < TILE / 8; ++n)
            for (int e = 0; e < 4; ++e) {
                const int key = k0 + n * 8 + 2 * t + (e & 1);
                const bool seen = key < N && (!CAUSAL || key <= rows[e >> 1]);
                s[n][e] = seen ? s[n][e] * scale : -INFINITY;
                mx[e >> 1] = fmaxf(mx[e >> 1], s[n][e]);
            }
        float alpha[2];
        for (int r = 0; r < 2; ++r) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(FULL_MASK, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(FULL_MASK, mx[r], 2));
            const float m_new = fmaxf(m[r], mx[r]);
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
            const unsigned pa[4] = {pair(s[2 * kk][0], s[2 * kk][1]), pair(s[2 * kk][2], s[2 * kk][3]),
                                    pair(s[2 * kk + 1][0], s[2 * kk + 1][1]), pair(s[2 * kk + 1][2], s[2 * kk + 1][3])};
            for (int n = 0; n < HEAD_DIM / 8; ++n) {
                unsigned b[2];
                ldmatrix_x2_trans(b, &Vs[kk * 16 + (lane & 15)][n * 8]);
                MMA16816(o[n], pa, b, o[n]);
            }
        }
        __syncthreads();  // all warps are done with Ks and Vs before the next tile overwrites them
    }

    for (int r = 0; r < 2; ++r) {
        if (rows[r] >= N) continue;
        elem* out = O + (head * N + rows[r]) * HEAD_DIM;
        for (int n = 0; n < HEAD_DIM / 8; ++n)
            for (int e = 0; e < 2; ++e) out[n * 8 + 2 * t + e] = to_elem(o[n][2 * r + e] / l[r]);
        if (t == 0) L[head * N + rows[r]] = m[r] + logf(l[r]);
    }
}

// expect: V loaded without .trans
// Mistake: V loaded like K, with the plain ldmatrix: every 8 x 8 block of V used transposed.
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#ifndef HEAD_DIM
#define HEAD_DIM 64             // 64 or 128, fixed at compile time (-DHEAD_DIM=128): sizes the register arrays
#endif
#ifndef ELEM_BF16
#define ELEM_BF16 0             // -DELEM_BF16=1: bfloat16 tensors instead of half
#endif
#define TILE 64                 // query rows per block (4 warps x 16), and keys per K/V tile
#define STRIDE (HEAD_DIM + 8)   // shared row stride in elements (16 bytes of padding)

// The element type, the packing of two floats into one register (the lower column in the
// lower half) and the mma that multiplies such registers, for the precision chosen above.
#if ELEM_BF16
typedef __nv_bfloat16 elem;
__device__ __forceinline__ unsigned pack2(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<unsigned*>(&v);
}
#define MMA mma_m16n8k16_bf16
#else
typedef __half elem;
__device__ __forceinline__ unsigned pack2(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<unsigned*>(&v);
}
#define MMA mma_m16n8k16_f16
#endif

// Rows [row0, row0 + TILE) of one head's [N, HEAD_DIM] matrix into shared memory, 16 bytes per
// access; rows past N become zeros (a V row of NaN would poison P V even where P is 0).
__device__ __forceinline__ void load_tile(elem* dst, const elem* src, int row0, int N) {
    for (int c = threadIdx.x; c < TILE * HEAD_DIM / 8; c += blockDim.x) {
        const int r = c / (HEAD_DIM / 8), col = c % (HEAD_DIM / 8) * 8;
        int4 v = make_int4(0, 0, 0, 0);
        if (row0 + r < N) v = *reinterpret_cast<const int4*>(src + (size_t)(row0 + r) * HEAD_DIM + col);
        *reinterpret_cast<int4*>(dst + r * STRIDE + col) = v;
    }
}

extern "C" __global__ void tc_flash_fwd(const elem* Q, const elem* K, const elem* V, elem* O, float* L,
                                        int N, float scale) {
    // Block (blockIdx.x, h = blockIdx.y, b = blockIdx.z) owns query rows 64*blockIdx.x .. +63 of
    // head (b, h); warp w owns 16 of them. Per tile of 64 keys: S = Q K^T in C fragments, the
    // online softmax on those registers, P repacked in registers as the A fragment of P V.
    __shared__ __align__(16) elem Ks[TILE * STRIDE];  // also stages the Q tile once, at the start
    __shared__ __align__(16) elem Vs[TILE * STRIDE];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    const size_t head = (size_t)blockIdx.z * gridDim.y + blockIdx.y;
    const int q0 = blockIdx.x * TILE;
    const float scale_log2 = scale * 1.4426950408889634f;  // scores in the log2 domain: one exp2 each
    const elem* Qh = Q + head * N * HEAD_DIM;
    const elem* Kh = K + head * N * HEAD_DIM;
    const elem* Vh = V + head * N * HEAD_DIM;

    load_tile(Ks, Qh, q0, N);
    __syncthreads();
    unsigned qf[HEAD_DIM / 16][4];  // the warp's 16 query rows as A fragments, for the whole walk
    for (int kk = 0; kk < HEAD_DIM / 16; ++kk)
        ldmatrix_x4(qf[kk], Ks + (warp * 16 + lane % 16) * STRIDE + kk * 16 + lane / 16 * 8);

    float o[HEAD_DIM / 8][4] = {};  // the output accumulator: HEAD_DIM / 8 C fragments
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // rows g and g + 8 of the warp
    const int row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};

    for (int k0 = 0; k0 < N; k0 += TILE) {
        __syncthreads();  // every warp is done with the previous tiles (and with Q, the first time)
        load_tile(Ks, Kh, k0, N);
        load_tile(Vs, Vh, k0, N);
        __syncthreads();

        float s[TILE / 8][4] = {};
        for (int kk = 0; kk < HEAD_DIM / 16; ++kk)
            for (int n = 0; n < TILE / 8; n += 2) {
                unsigned b[4];  // K is N x K for this product: the plain ldmatrix gives B
                const int mat = lane / 8;
                ldmatrix_x4(b, Ks + (n * 8 + mat / 2 * 8 + lane % 8) * STRIDE + kk * 16 + mat % 2 * 8);
                MMA(s[n], qf[kk], b, s[n]);
                MMA(s[n + 1], qf[kk], b + 2, s[n + 1]);
            }

        // Online softmax on the C fragments: s[n][e] is row g + 8 * (e / 2), key k0 + 8n + 2t + e % 2.
        float tile_max[2] = {-INFINITY, -INFINITY};
        for (int n = 0; n < TILE / 8; ++n)
            for (int e = 0; e < 4; ++e) {
                const int key = k0 + n * 8 + 2 * t + e % 2;
                s[n][e] = key < N ? s[n][e] * scale_log2 : -INFINITY;
                tile_max[e / 2] = fmaxf(tile_max[e / 2], s[n][e]);
            }
        float alpha[2], base[2];
        for (int r = 0; r < 2; ++r) {
            // A row's 64 scores sit in the 4 lanes of a quad (same g): reduce across them.
            tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(FULL_MASK, tile_max[r], 1));
            tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(FULL_MASK, tile_max[r], 2));
            const float m_new = fmaxf(m[r], tile_max[r]);
            base[r] = m_new == -INFINITY ? 0.0f : m_new;  // no key seen yet: p = 0, not NaN
            alpha[r] = exp2f(m[r] - base[r]);
            m[r] = m_new;
            l[r] *= alpha[r];
        }
        for (int n = 0; n < HEAD_DIM / 8; ++n)
            for (int e = 0; e < 4; ++e) o[n][e] *= alpha[e / 2];

        for (int kk = 0; kk < TILE / 16; ++kk) {
            // Keys 16kk .. 16kk + 15 are the C fragments s[2kk] (first 8) and s[2kk + 1] (last 8);
            // packed in the order rows g, g + 8 of the first 8 keys, then of the last 8, they are
            // exactly the A fragment of P for P V: no trip through shared memory.
            float p[8];
            for (int e = 0; e < 4; ++e) {
                p[e] = exp2f(s[2 * kk][e] - base[e / 2]);
                p[4 + e] = exp2f(s[2 * kk + 1][e] - base[e / 2]);
            }
            l[0] += p[0] + p[1] + p[4] + p[5];  // this lane's share of the row sums; the quad
            l[1] += p[2] + p[3] + p[6] + p[7];  // adds its four shares up once, at the end
            const unsigned a[4] = {pack2(p[0], p[1]), pack2(p[2], p[3]), pack2(p[4], p[5]), pack2(p[6], p[7])};
            for (int n = 0; n < HEAD_DIM / 8; n += 2) {
                unsigned b[4];  // V is K x N for this product (a row holds consecutive n): .trans
                const int mat = lane / 8;
                ldmatrix_x4(b, Vs + (kk * 16 + mat % 2 * 8 + lane % 8) * STRIDE + n * 8 + mat / 2 * 8);
                MMA(o[n], a, b, o[n]);
                MMA(o[n + 1], a, b + 2, o[n + 1]);
            }
        }
    }

    for (int r = 0; r < 2; ++r) {
        l[r] += __shfl_xor_sync(FULL_MASK, l[r], 1);
        l[r] += __shfl_xor_sync(FULL_MASK, l[r], 2);
        if (row[r] >= N) continue;
        const float inv = 1.0f / l[r];  // every real row has at least one key, so l > 0
        elem* out = O + (head * N + row[r]) * HEAD_DIM;
        for (int n = 0; n < HEAD_DIM / 8; ++n)
            *reinterpret_cast<unsigned*>(out + n * 8 + 2 * t) = pack2(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
        if (t == 0) L[head * N + row[r]] = (m[r] + log2f(l[r])) * 0.6931471805599453f;  // back to natural log
    }
}

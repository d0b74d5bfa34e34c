// tc_flash_fwd.cu: a FlashAttention-2 forward on tensor cores, the baseline the performance
// modules start from (module 08's kernel, before the pipelining of module 09).
//
// One block = 64 query rows of one head, 4 warps of 16 rows each. Per 64-key tile: K and V are
// staged in shared memory (rows padded by 16 bytes so ldmatrix reads them without bank
// conflicts), S = Q K^T comes out of mma.sync in C fragments, the online softmax runs on those
// registers (row max and sum across the 4 lanes of a quad), and P, repacked to fp16 in
// registers, is directly the A fragment of P V. Scores are kept in the log2 domain (scale and
// log2 e folded into one factor) so each exponential is one exp2.
//
// Compile-time: HEAD_DIM (64 or 128), CAUSAL (0/1). Kernels: tc_flash_fwd_f16 and _bf16.
// Launch: grid (ceil_div(S, 64), H, B), block 128, dynamic shared memory 3 * 64 * (HEAD_DIM + 8) * 2 bytes.
// Q, K, V, O: [B, H, S, HEAD_DIM] of ELEM; L: [B, H, S] float (natural-log logsumexp).
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#ifndef HEAD_DIM
#define HEAD_DIM 64
#endif
#ifndef CAUSAL
#define CAUSAL 0
#endif
#define TILE 64
#define STRIDE (HEAD_DIM + 8)

// Per element type: two floats packed into one register (the lower column in the lower half),
// and the mma that multiplies such registers.
template <class T> struct Elem;
template <> struct Elem<__half> {
    static __device__ __forceinline__ unsigned pack(float lo, float hi) {
        __half2 v = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<unsigned*>(&v);
    }
    static __device__ __forceinline__ void mma(float d[4], const unsigned a[4], const unsigned b[2]) {
        mma_m16n8k16_f16(d, a, b, d);
    }
};
template <> struct Elem<__nv_bfloat16> {
    static __device__ __forceinline__ unsigned pack(float lo, float hi) {
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<unsigned*>(&v);
    }
    static __device__ __forceinline__ void mma(float d[4], const unsigned a[4], const unsigned b[2]) {
        mma_m16n8k16_bf16(d, a, b, d);
    }
};

// Rows [row0, row0 + 64) of one head's [S, HEAD_DIM] matrix into shared memory, 16 bytes per
// access; rows past S are zeros (a V row of NaN would poison P V even where P is 0).
template <class ELEM>
__device__ __forceinline__ void load_tile(ELEM* dst, const ELEM* src, int row0, int S) {
    constexpr int chunks = TILE * HEAD_DIM / 8;
    for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
        int r = c / (HEAD_DIM / 8), col = c % (HEAD_DIM / 8) * 8;
        int4 v = make_int4(0, 0, 0, 0);
        if (row0 + r < S) v = *reinterpret_cast<const int4*>(src + size_t(row0 + r) * HEAD_DIM + col);
        *reinterpret_cast<int4*>(dst + r * STRIDE + col) = v;
    }
}

template <class ELEM>
__device__ void flash_forward(const ELEM* Q, const ELEM* K, const ELEM* V, ELEM* O, float* L, int S, float scale) {
    extern __shared__ __align__(16) unsigned char smem[];
    ELEM* Qs = reinterpret_cast<ELEM*>(smem);
    ELEM* Ks = Qs + TILE * STRIDE;
    ELEM* Vs = Ks + TILE * STRIDE;

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    const size_t head = (size_t(blockIdx.z) * gridDim.y + blockIdx.y) * size_t(S) * HEAD_DIM;
    const int q0 = blockIdx.x * TILE;
    const float scale_log2 = scale * 1.4426950408889634f;

    load_tile(Qs, Q + head, q0, S);
    __syncthreads();
    unsigned qf[HEAD_DIM / 16][4];
    for (int kk = 0; kk < HEAD_DIM / 16; ++kk)
        ldmatrix_x4(qf[kk], Qs + (warp * 16 + lane % 16) * STRIDE + kk * 16 + lane / 16 * 8);

    float o[HEAD_DIM / 8][4] = {};
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // rows g and g + 8 of this warp
    const int row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
    const int tiles = CAUSAL ? min(ceil_div(S, TILE), blockIdx.x + 1) : ceil_div(S, TILE);

    for (int j = 0; j < tiles; ++j) {
        __syncthreads();  // every warp is done with the previous K and V tiles
        load_tile(Ks, K + head, j * TILE, S);
        load_tile(Vs, V + head, j * TILE, S);
        __syncthreads();

        float s[TILE / 8][4] = {};
        for (int kk = 0; kk < HEAD_DIM / 16; ++kk)
            for (int n = 0; n < TILE / 8; n += 2) {
                // K is stored key-major (N x K for this product): the plain ldmatrix gives B.
                unsigned b[4];
                const int mat = lane / 8;
                ldmatrix_x4(b, Ks + (n * 8 + mat / 2 * 8 + lane % 8) * STRIDE + kk * 16 + mat % 2 * 8);
                Elem<ELEM>::mma(s[n], qf[kk], b);
                Elem<ELEM>::mma(s[n + 1], qf[kk], b + 2);
            }

        float tile_max[2] = {-INFINITY, -INFINITY};
        for (int n = 0; n < TILE / 8; ++n)
            for (int e = 0; e < 4; ++e) {
                const int key = j * TILE + n * 8 + 2 * t + (e & 1), r = e / 2;
                bool keep = key < S && (!CAUSAL || key <= row[r]);
                s[n][e] = keep ? s[n][e] * scale_log2 : -INFINITY;
                tile_max[r] = fmaxf(tile_max[r], s[n][e]);
            }
        float alpha[2], base[2];
        for (int r = 0; r < 2; ++r) {
            tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(FULL_MASK, tile_max[r], 1));
            tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(FULL_MASK, tile_max[r], 2));
            const float m_new = fmaxf(m[r], tile_max[r]);
            base[r] = m_new == -INFINITY ? 0.f : m_new;  // a row with no visible key yet: p = 0, no NaN
            alpha[r] = exp2f(m[r] - base[r]);
            m[r] = m_new;
            l[r] *= alpha[r];
        }
        for (int n = 0; n < HEAD_DIM / 8; ++n)
            for (int e = 0; e < 4; ++e) o[n][e] *= alpha[e / 2];

        for (int kk = 0; kk < TILE / 16; ++kk) {
            // The C fragments of S for keys [16 kk, 16 kk + 16) are the A fragment of P.
            float p[8];
            for (int e = 0; e < 4; ++e) {
                p[e] = exp2f(s[2 * kk][e] - base[e / 2]);
                p[4 + e] = exp2f(s[2 * kk + 1][e] - base[e / 2]);
            }
            l[0] += p[0] + p[1] + p[4] + p[5];
            l[1] += p[2] + p[3] + p[6] + p[7];
            const unsigned a[4] = {Elem<ELEM>::pack(p[0], p[1]), Elem<ELEM>::pack(p[2], p[3]), Elem<ELEM>::pack(p[4], p[5]), Elem<ELEM>::pack(p[6], p[7])};
            for (int n = 0; n < HEAD_DIM / 8; n += 2) {
                // V is stored key-major (K x N for this product): the transposing ldmatrix gives B.
                unsigned b[4];
                const int mat = lane / 8;
                ldmatrix_x4_trans(b, Vs + (kk * 16 + mat % 2 * 8 + lane % 8) * STRIDE + n * 8 + mat / 2 * 8);
                Elem<ELEM>::mma(o[n], a, b);
                Elem<ELEM>::mma(o[n + 1], a, b + 2);
            }
        }
    }

    for (int r = 0; r < 2; ++r) {
        l[r] += __shfl_xor_sync(FULL_MASK, l[r], 1);
        l[r] += __shfl_xor_sync(FULL_MASK, l[r], 2);
    }
    for (int r = 0; r < 2; ++r) {
        if (row[r] >= S) continue;
        const float inv = l[r] > 0.f ? 1.f / l[r] : 0.f;
        ELEM* out = O + head + size_t(row[r]) * HEAD_DIM;
        for (int n = 0; n < HEAD_DIM / 8; ++n)
            *reinterpret_cast<unsigned*>(out + n * 8 + 2 * t) = Elem<ELEM>::pack(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
        if (t == 0)
            L[size_t(blockIdx.z * gridDim.y + blockIdx.y) * S + row[r]] =
                l[r] > 0.f ? (m[r] + log2f(l[r])) * 0.6931471805599453f : -INFINITY;
    }
}

extern "C" __global__ void tc_flash_fwd_f16(const __half* Q, const __half* K, const __half* V, __half* O, float* L,
                                            int S, float scale) {
    flash_forward(Q, K, V, O, L, S, scale);
}

extern "C" __global__ void tc_flash_fwd_bf16(const __nv_bfloat16* Q, const __nv_bfloat16* K, const __nv_bfloat16* V,
                                             __nv_bfloat16* O, float* L, int S, float scale) {
    flash_forward(Q, K, V, O, L, S, scale);
}

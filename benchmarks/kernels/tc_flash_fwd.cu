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
// Versions (llm.c style, one idea each):
//   tc_flash_fwd_{f16,bf16}       the above: 64 query rows per block, K and V loaded, then used.
//     Launch: grid (ceil_div(S, 64), H, B), block 128, shared 3 * 64 * (HEAD_DIM + 8) * 2 bytes.
//   tc_flash_fwd_pipe_{f16,bf16}  128 query rows per block (8 warps share each K/V tile: half the
//     shared-memory traffic per FLOP), K/V tiles double-buffered with cp.async: tile j + 1 is in
//     flight while tile j is multiplied.
//     Launch: grid (ceil_div(S, 128), H, B), block 256, shared (128 + 4 * 64) * (HEAD_DIM + 8) * 2 bytes.
// Compile-time: HEAD_DIM (64 or 128), CAUSAL (0/1).
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

// One K/V tile for one warp's 16 query rows: S = Q K^T in C fragments, the online softmax on them,
// then O += P V with P repacked in registers. `warp_row0` is the warp's first query row.
template <class ELEM>
__device__ __forceinline__ void tile_step(const unsigned (&qf)[HEAD_DIM / 16][4], const ELEM* Ks, const ELEM* Vs,
                                          float (&o)[HEAD_DIM / 8][4], float (&m)[2], float (&l)[2],
                                          const int (&row)[2], int j, int S, int warp_row0, float scale_log2) {
    const int lane = threadIdx.x % 32, t = lane % 4;
    float s[TILE / 8][4] = {};
    for (int kk = 0; kk < HEAD_DIM / 16; ++kk)
        for (int n = 0; n < TILE / 8; n += 2) {
            unsigned b[4];
            const int mat = lane / 8;
            ldmatrix_x4(b, Ks + (n * 8 + mat / 2 * 8 + lane % 8) * STRIDE + kk * 16 + mat % 2 * 8);
            Elem<ELEM>::mma(s[n], qf[kk], b);
            Elem<ELEM>::mma(s[n + 1], qf[kk], b + 2);
        }

    float tile_max[2] = {-INFINITY, -INFINITY};
    const bool edge = (j + 1) * TILE > S || (CAUSAL && (j + 1) * TILE > warp_row0);
    for (int n = 0; n < TILE / 8; ++n)
        for (int e = 0; e < 4; ++e) {
            const int key = j * TILE + n * 8 + 2 * t + (e & 1), r = e / 2;
            bool keep = !edge || (key < S && (!CAUSAL || key <= row[r]));
            s[n][e] = keep ? s[n][e] * scale_log2 : -INFINITY;
            tile_max[r] = fmaxf(tile_max[r], s[n][e]);
        }
    float alpha[2], base[2];
    for (int r = 0; r < 2; ++r) {
        tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(FULL_MASK, tile_max[r], 1));
        tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(FULL_MASK, tile_max[r], 2));
        const float m_new = fmaxf(m[r], tile_max[r]);
        base[r] = m_new == -INFINITY ? 0.f : m_new;
        alpha[r] = exp2f(m[r] - base[r]);
        m[r] = m_new;
        l[r] *= alpha[r];
    }
    for (int n = 0; n < HEAD_DIM / 8; ++n)
        for (int e = 0; e < 4; ++e) o[n][e] *= alpha[e / 2];

    for (int kk = 0; kk < TILE / 16; ++kk) {
        float p[8];
        for (int e = 0; e < 4; ++e) {
            p[e] = exp2f(s[2 * kk][e] - base[e / 2]);
            p[4 + e] = exp2f(s[2 * kk + 1][e] - base[e / 2]);
        }
        l[0] += p[0] + p[1] + p[4] + p[5];
        l[1] += p[2] + p[3] + p[6] + p[7];
        const unsigned a[4] = {Elem<ELEM>::pack(p[0], p[1]), Elem<ELEM>::pack(p[2], p[3]),
                               Elem<ELEM>::pack(p[4], p[5]), Elem<ELEM>::pack(p[6], p[7])};
        for (int n = 0; n < HEAD_DIM / 8; n += 2) {
            unsigned b[4];
            const int mat = lane / 8;
            ldmatrix_x4_trans(b, Vs + (kk * 16 + mat % 2 * 8 + lane % 8) * STRIDE + n * 8 + mat / 2 * 8);
            Elem<ELEM>::mma(o[n], a, b);
            Elem<ELEM>::mma(o[n + 1], a, b + 2);
        }
    }
}

// The end of a warp's rows: the row sums completed across the quad, O = acc / l written as the
// 16-bit type, and L = m + log l (natural log) by one lane of each quad.
template <class ELEM>
__device__ __forceinline__ void store_rows(ELEM* O, float* L, float (&o)[HEAD_DIM / 8][4], const float (&m)[2],
                                           float (&l)[2], const int (&row)[2], int S) {
    const int t = threadIdx.x % 4;
    const size_t head = (size_t(blockIdx.z) * gridDim.y + blockIdx.y) * size_t(S);
    for (int r = 0; r < 2; ++r) {
        l[r] += __shfl_xor_sync(FULL_MASK, l[r], 1);
        l[r] += __shfl_xor_sync(FULL_MASK, l[r], 2);
    }
    for (int r = 0; r < 2; ++r) {
        if (row[r] >= S) continue;
        const float inv = l[r] > 0.f ? 1.f / l[r] : 0.f;
        ELEM* out = O + (head + row[r]) * HEAD_DIM;
        for (int n = 0; n < HEAD_DIM / 8; ++n)
            *reinterpret_cast<unsigned*>(out + n * 8 + 2 * t) = Elem<ELEM>::pack(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
        if (t == 0)
            L[head + row[r]] =
                l[r] > 0.f ? (m[r] + log2f(l[r])) * 0.6931471805599453f : -INFINITY;
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

        tile_step<ELEM>(qf, Ks, Vs, o, m, l, row, j, S, q0 + warp * 16, scale_log2);
    }

    store_rows<ELEM>(O, L, o, m, l, row, S);
}

// Rows [row0, row0 + TILE) of K or V into shared memory with cp.async; rows past S are zero-filled
// (the zero-fill form reads nothing, so the source only has to be some valid address).
template <class ELEM>
__device__ __forceinline__ void copy_tile_async(ELEM* dst, const ELEM* src, int row0, int S) {
    constexpr int chunks = TILE * HEAD_DIM / 8;
    for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
        int r = c / (HEAD_DIM / 8), col = c % (HEAD_DIM / 8) * 8;
        bool inside = row0 + r < S;
        cp_async_cg16_zfill(dst + r * STRIDE + col, src + size_t(inside ? row0 + r : 0) * HEAD_DIM + col, inside ? 16 : 0);
    }
}

template <class ELEM>
__device__ void flash_forward_pipe(const ELEM* Q, const ELEM* K, const ELEM* V, ELEM* O, float* L, int S,
                                   float scale) {
    constexpr int ROWS = 128;  // query rows per block: 8 warps of 16
    extern __shared__ __align__(16) unsigned char smem[];
    ELEM* Qs = reinterpret_cast<ELEM*>(smem);
    ELEM* KV = Qs + ROWS * STRIDE;  // buffer b: K at KV + 2 b TILE STRIDE, V right after it

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    const size_t head = (size_t(blockIdx.z) * gridDim.y + blockIdx.y) * size_t(S) * HEAD_DIM;
    // Causal: the last query tiles see the most keys; starting them first keeps the tail of the
    // grid short (blocks are launched roughly in blockIdx order).
    const int q0 = (CAUSAL ? gridDim.x - 1 - blockIdx.x : blockIdx.x) * ROWS;
    const float scale_log2 = scale * 1.4426950408889634f;
    const int tiles = CAUSAL ? min(ceil_div(S, TILE), ceil_div(q0 + ROWS, TILE)) : ceil_div(S, TILE);

    // Q and the first K/V tile travel together; the loop keeps one tile in flight ahead.
    copy_tile_async(Qs, Q + head, q0, S);
    copy_tile_async(Qs + TILE * STRIDE, Q + head, q0 + TILE, S);
    copy_tile_async(KV, K + head, 0, S);
    copy_tile_async(KV + TILE * STRIDE, V + head, 0, S);
    cp_async_commit();

    unsigned qf[HEAD_DIM / 16][4];
    float o[HEAD_DIM / 8][4] = {};
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
    const int row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};

    for (int j = 0; j < tiles; ++j) {
        ELEM* Ks = KV + (j % 2) * 2 * TILE * STRIDE;
        ELEM* Vs = Ks + TILE * STRIDE;
        if (j + 1 < tiles) {
            // The other buffer was last read in iteration j - 1, which every warp has left.
            ELEM* next = KV + ((j + 1) % 2) * 2 * TILE * STRIDE;
            copy_tile_async(next, K + head, (j + 1) * TILE, S);
            copy_tile_async(next + TILE * STRIDE, V + head, (j + 1) * TILE, S);
        }
        cp_async_commit();
        cp_async_wait<1>();  // everything but the newest group: tile j (and Q) have landed
        __syncthreads();
        if (j == 0)
            for (int kk = 0; kk < HEAD_DIM / 16; ++kk)
                ldmatrix_x4(qf[kk], Qs + (warp * 16 + lane % 16) * STRIDE + kk * 16 + lane / 16 * 8);
        // Causal: a tile whose first key is past this warp's last row adds nothing to it. The whole
        // warp skips it together, so mma and the shuffles stay warp-uniform.
        if (!CAUSAL || j * TILE <= q0 + warp * 16 + 15)
            tile_step<ELEM>(qf, Ks, Vs, o, m, l, row, j, S, q0 + warp * 16, scale_log2);
        __syncthreads();  // every warp is done with this buffer before iteration j + 1 refills it
    }

    store_rows<ELEM>(O, L, o, m, l, row, S);
}

extern "C" __global__ void tc_flash_fwd_f16(const __half* Q, const __half* K, const __half* V, __half* O, float* L,
                                            int S, float scale) {
    flash_forward(Q, K, V, O, L, S, scale);
}

extern "C" __global__ void tc_flash_fwd_bf16(const __nv_bfloat16* Q, const __nv_bfloat16* K, const __nv_bfloat16* V,
                                             __nv_bfloat16* O, float* L, int S, float scale) {
    flash_forward(Q, K, V, O, L, S, scale);
}

extern "C" __global__ void tc_flash_fwd_pipe_f16(const __half* Q, const __half* K, const __half* V, __half* O,
                                                 float* L, int S, float scale) {
    flash_forward_pipe(Q, K, V, O, L, S, scale);
}

extern "C" __global__ void tc_flash_fwd_pipe_bf16(const __nv_bfloat16* Q, const __nv_bfloat16* K,
                                                  const __nv_bfloat16* V, __nv_bfloat16* O, float* L, int S,
                                                  float scale) {
    flash_forward_pipe(Q, K, V, O, L, S, scale);
}

// A warp per key instead of a slot of HEAD_DIM / 8 lanes: warp w takes keys start + w, start + w + 4,
// ..., each lane holding HEAD_DIM / 32 consecutive columns (read as __half2), and the score reduced over
// the whole warp with __shfl_xor_sync; every query of the head (up to 16) rides along the one walk, so
// each valid key row is read once. The online softmax is natural-log (expf) and updated key by key,
// rescaling only when a key raises the max; the four warps' states are merged through shared memory.
#include <cuda_fp16.h>
#ifndef HEAD_DIM
#define HEAD_DIM 64
#endif
#define THREADS 128
#define WARPS (THREADS / 32)
#define CPL (HEAD_DIM / 32)  // columns per lane
#define MAX_Q 16

extern "C" __global__ void decode_split(const __half* Q, const __half* K, const __half* V, const int* lengths,
                                        float* O_part, float* L_part, int n_q, int N, int splits, float scale) {
    __shared__ float wm[WARPS][MAX_Q], wl[WARPS][MAX_Q];
    __shared__ float wacc[WARPS][MAX_Q][HEAD_DIM];
    const int s = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32, c0 = lane * CPL;
    const size_t head = (size_t)blockIdx.z * gridDim.y + blockIdx.y;
    const int chunk = (N + splits - 1) / splits;
    const int start = s * chunk, end = min(start + chunk, lengths[blockIdx.z]);

    float q[MAX_Q][CPL], acc[MAX_Q][CPL], m[MAX_Q], l[MAX_Q];
    for (int i = 0; i < MAX_Q; ++i) {
        for (int c = 0; c < CPL; c += 2) {
            float2 f = make_float2(0.0f, 0.0f);
            if (i < n_q) f = __half22float2(*reinterpret_cast<const __half2*>(Q + (head * n_q + i) * HEAD_DIM + c0 + c));
            q[i][c] = f.x * scale;
            q[i][c + 1] = f.y * scale;
            acc[i][c] = acc[i][c + 1] = 0.0f;
        }
        m[i] = -INFINITY;
        l[i] = 0.0f;
    }
    const __half* Kh = K + head * N * HEAD_DIM + c0;
    const __half* Vh = V + head * N * HEAD_DIM + c0;
    for (int key = start + warp; key < end; key += WARPS) {  // the same trip count for all lanes of a warp
        float k[CPL], v[CPL];
        for (int c = 0; c < CPL; c += 2) {
            const float2 kf = __half22float2(*reinterpret_cast<const __half2*>(Kh + (size_t)key * HEAD_DIM + c));
            const float2 vf = __half22float2(*reinterpret_cast<const __half2*>(Vh + (size_t)key * HEAD_DIM + c));
            k[c] = kf.x; k[c + 1] = kf.y;
            v[c] = vf.x; v[c + 1] = vf.y;
        }
        for (int i = 0; i < n_q; ++i) {
            float dot = 0.0f;
            for (int c = 0; c < CPL; ++c) dot += q[i][c] * k[c];
            for (int off = 16; off > 0; off >>= 1) dot += __shfl_xor_sync(FULL_MASK, dot, off);
            if (dot > m[i]) {  // a new max: rescale what was accumulated (to 0 the first time)
                const float alpha = expf(m[i] - dot);
                l[i] *= alpha;
                for (int c = 0; c < CPL; ++c) acc[i][c] *= alpha;
                m[i] = dot;
            }
            const float p = expf(dot - m[i]);
            l[i] += p;
            for (int c = 0; c < CPL; ++c) acc[i][c] += p * v[c];
        }
    }
    for (int i = 0; i < n_q; ++i) {
        for (int c = 0; c < CPL; ++c) wacc[warp][i][c0 + c] = acc[i][c];
        if (lane == 0) {
            wm[warp][i] = m[i];
            wl[warp][i] = l[i];
        }
    }
    __syncthreads();
    for (int e = threadIdx.x; e < n_q * HEAD_DIM; e += THREADS) {
        const int i = e / HEAD_DIM, c = e % HEAD_DIM;
        float mx = -INFINITY;
        for (int w = 0; w < WARPS; ++w) mx = fmaxf(mx, wm[w][i]);
        const float base = mx == -INFINITY ? 0.0f : mx;  // an empty chunk: every weight is 0, not NaN
        float l_sum = 0.0f, o = 0.0f;
        for (int w = 0; w < WARPS; ++w) {
            const float f = expf(wm[w][i] - base);
            l_sum += f * wl[w][i];
            o += f * wacc[w][i][c];
        }
        const size_t row = (head * splits + s) * n_q + i;
        O_part[row * HEAD_DIM + c] = l_sum > 0.0f ? o / l_sum : 0.0f;
        if (c == 0) L_part[row] = l_sum > 0.0f ? mx + logf(l_sum) : -INFINITY;
    }
}

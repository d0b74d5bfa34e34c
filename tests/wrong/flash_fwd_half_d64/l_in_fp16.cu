// expect: running sum l kept in fp16
// Mistake: the row statistics m and l are __half, like the tensors.
#include <cuda_fp16.h>
#ifndef HEAD_DIM
#define HEAD_DIM 64     // d, fixed when the kernel is compiled (-DHEAD_DIM=128): every loop over it has a known trip count
#endif
#define ROWS 64         // query rows per block
#define TPR 4           // threads per query row: lanes 4r .. 4r+3 of the block share row r
#define BC 32           // keys per K/V tile
#define NV (HEAD_DIM / 16)   // float4 column groups per thread: group k*TPR + g belongs to lane g of the row

extern "C" __global__ void flash_fwd_half(const __half* Q, const __half* K, const __half* V, __half* O, float* L,
                                          int N, float scale) {
    // fp16 in and out; scores, m, l and the output accumulator in fp32. Four threads share a query
    // row, each holding a quarter of q and of acc in registers (float4 groups g, g + 4, ...: the four
    // lanes of a row read 64 consecutive bytes of a K or V row, so a warp's shared loads do not conflict).
    // K and V tiles are converted to fp32 once, when they are staged in shared memory.
    __shared__ float4 Ks[BC][HEAD_DIM / 4];
    __shared__ float4 Vs[BC][HEAD_DIM / 4];
    int t = threadIdx.x, g = t % TPR;
    size_t head = (size_t)blockIdx.z * gridDim.y + blockIdx.y;
    const __half* Qh = Q + head * N * HEAD_DIM;
    const __half* Kh = K + head * N * HEAD_DIM;
    const __half* Vh = V + head * N * HEAD_DIM;
    int row = blockIdx.x * ROWS + t / TPR;
    bool active = row < N;              // inactive rows compute on zeros but still reach every barrier and shuffle

    float4 q[NV], acc[NV];              // constant indices after unrolling: registers, not local memory
#pragma unroll
    for (int k = 0; k < NV; ++k) {
        int col = 4 * (k * TPR + g);
        float2 a = make_float2(0.0f, 0.0f), b = a;
        if (active) {                   // 4 halves = one 8-byte load
            uint2 raw = *reinterpret_cast<const uint2*>(Qh + (size_t)row * HEAD_DIM + col);
            a = __half22float2(*reinterpret_cast<__half2*>(&raw.x));
            b = __half22float2(*reinterpret_cast<__half2*>(&raw.y));
        }
        q[k] = make_float4(a.x, a.y, b.x, b.y);
        acc[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    __half m = __float2half(-INFINITY), l = __float2half(0.0f);

    for (int start = 0; start < N; start += BC) {
        // Stage the tile: 8 halves (16 bytes) per load, converted to two float4; rows past N are zeros.
        for (int i = t; i < BC * HEAD_DIM / 8; i += ROWS * TPR) {
            int j = i / (HEAD_DIM / 8), col = 8 * (i % (HEAD_DIM / 8));
            uint4 kr = make_uint4(0, 0, 0, 0), vr = kr;
            if (start + j < N) {
                kr = *reinterpret_cast<const uint4*>(Kh + (size_t)(start + j) * HEAD_DIM + col);
                vr = *reinterpret_cast<const uint4*>(Vh + (size_t)(start + j) * HEAD_DIM + col);
            }
            const __half2* kh = reinterpret_cast<const __half2*>(&kr);
            const __half2* vh = reinterpret_cast<const __half2*>(&vr);
            float2 k0 = __half22float2(kh[0]), k1 = __half22float2(kh[1]), k2 = __half22float2(kh[2]), k3 = __half22float2(kh[3]);
            float2 v0 = __half22float2(vh[0]), v1 = __half22float2(vh[1]), v2 = __half22float2(vh[2]), v3 = __half22float2(vh[3]);
            Ks[j][col / 4] = make_float4(k0.x, k0.y, k1.x, k1.y);
            Ks[j][col / 4 + 1] = make_float4(k2.x, k2.y, k3.x, k3.y);
            Vs[j][col / 4] = make_float4(v0.x, v0.y, v1.x, v1.y);
            Vs[j][col / 4 + 1] = make_float4(v2.x, v2.y, v3.x, v3.y);
        }
        __syncthreads();

        float s[BC];
        float m_tile = -INFINITY;
#pragma unroll
        for (int j = 0; j < BC; ++j) {
            float dot = 0.0f;
#pragma unroll
            for (int k = 0; k < NV; ++k) {
                float4 kv = Ks[j][k * TPR + g];
                dot += q[k].x * kv.x + q[k].y * kv.y + q[k].z * kv.z + q[k].w * kv.w;
            }
            dot += __shfl_xor_sync(FULL_MASK, dot, 1);   // the row's four partial dot products
            dot += __shfl_xor_sync(FULL_MASK, dot, 2);
            s[j] = (start + j < N) ? scale * dot : -INFINITY;
            m_tile = fmaxf(m_tile, s[j]);
        }
        float m_new = fmaxf(__half2float(m), m_tile);
        float alpha = expf(__half2float(m) - m_new);
        l = __float2half(__half2float(l) * alpha);
#pragma unroll
        for (int k = 0; k < NV; ++k) {
            acc[k].x *= alpha; acc[k].y *= alpha; acc[k].z *= alpha; acc[k].w *= alpha;
        }
#pragma unroll
        for (int j = 0; j < BC; ++j) {
            float p = expf(s[j] - m_new);
            l = __float2half(__half2float(l) + p);
#pragma unroll
            for (int k = 0; k < NV; ++k) {
                float4 vv = Vs[j][k * TPR + g];
                acc[k].x += p * vv.x; acc[k].y += p * vv.y; acc[k].z += p * vv.z; acc[k].w += p * vv.w;
            }
        }
        m = __float2half(m_new);
        __syncthreads();                // the tile is read by all before the next one overwrites it
    }

    if (active) {
        float inv = 1.0f / __half2float(l);
#pragma unroll
        for (int k = 0; k < NV; ++k) {
            __half2 lo = __floats2half2_rn(acc[k].x * inv, acc[k].y * inv);
            __half2 hi = __floats2half2_rn(acc[k].z * inv, acc[k].w * inv);
            uint2 raw = make_uint2(*reinterpret_cast<unsigned*>(&lo), *reinterpret_cast<unsigned*>(&hi));
            *reinterpret_cast<uint2*>(O + ((head * N + row) * HEAD_DIM + 4 * (k * TPR + g))) = raw;
        }
        if (g == 0) L[head * N + row] = __half2float(m) + logf(__half2float(l));
    }
}

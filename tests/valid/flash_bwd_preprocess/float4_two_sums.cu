// float4 loads when d is a multiple of 4 (every row then starts 16-byte aligned), a scalar loop
// otherwise; two partial sums with fmaf, added at the end.
extern "C" __global__ void flash_bwd_preprocess(const float* O, const float* dO, float* D, int rows, int d) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) {
        const size_t at = (size_t)r * d;
        float even = 0.0f, odd = 0.0f;
        if (d % 4 == 0) {
            const float4* o4 = reinterpret_cast<const float4*>(O + at);
            const float4* g4 = reinterpret_cast<const float4*>(dO + at);
            for (int k = 0; k < d / 4; ++k) {
                const float4 o = o4[k], g = g4[k];
                even = fmaf(o.x, g.x, even);
                odd = fmaf(o.y, g.y, odd);
                even = fmaf(o.z, g.z, even);
                odd = fmaf(o.w, g.w, odd);
            }
        } else {
            for (int c = 0; c < d; ++c) {
                if (c & 1) odd = fmaf(O[at + c], dO[at + c], odd);
                else even = fmaf(O[at + c], dO[at + c], even);
            }
        }
        D[r] = even + odd;
    }
}

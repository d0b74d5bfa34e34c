// cp.async kernels for tests/emulator/test_async.py.
#define T 16

// Threads 0-63 copy a 16x16 tile of A, 64-127 one of B: 16 bytes (4 floats) each.
__device__ void load_tiles(float (*As)[T], float (*Bs)[T], const float* A, const float* B, int n, int k0, int id) {
    int r = (id % 64) / 4, c = (id % 4) * 4;
    if (id < 64)
        cp_async_cg16(&As[r][c], &A[(blockIdx.y * T + r) * n + k0 + c]);
    else if (id < 128)
        cp_async_cg16(&Bs[r][c], &B[(k0 + r) * n + blockIdx.x * T + c]);
}

// C = A B (n x n, n a multiple of 16), double-buffered: tile s+1 is in flight while tile s is used.
extern "C" __global__ void matmul_async(const float* A, const float* B, float* C, int n) {
    __shared__ __align__(16) float As[2][T][T];
    __shared__ __align__(16) float Bs[2][T][T];
    int tx = threadIdx.x, ty = threadIdx.y, id = ty * T + tx;
    int steps = n / T;
    load_tiles(As[0], Bs[0], A, B, n, 0, id);
    cp_async_commit();
    float acc = 0.0f;
    for (int s = 0; s < steps; ++s) {
        if (s + 1 < steps) load_tiles(As[(s + 1) % 2], Bs[(s + 1) % 2], A, B, n, (s + 1) * T, id);
        cp_async_commit();
        cp_async_wait<1>();  // all but the newest group: tile s has landed
        __syncthreads();
        for (int k = 0; k < T; ++k) acc += As[s % 2][ty][k] * Bs[s % 2][k][tx];
        __syncthreads();  // before the next iteration overwrites this buffer
    }
    C[(blockIdx.y * T + ty) * n + blockIdx.x * T + tx] = acc;
}

// out (64 floats) = x (n <= 64 floats), then zeros: the tail chunk copies what is left.
extern "C" __global__ void copy_tail(const float* x, float* out, int n) {
    __shared__ __align__(16) float s[64];
    int i = threadIdx.x;  // 16 threads, 4 floats each
    int left = n - 4 * i;
    int bytes = left >= 4 ? 16 : left > 0 ? 4 * left : 0;
    cp_async_cg16_zfill(&s[4 * i], &x[4 * i], bytes);
    cp_async_wait_all();
    __syncthreads();
    for (int j = i; j < 64; j += 16) out[j] = s[j];
}

// out = x through shared memory: 4-byte copies for even chunks of 2 floats, one 8-byte copy for odd.
extern "C" __global__ void copy_ca(const float* x, float* out) {
    __shared__ __align__(16) float s[64];
    int i = threadIdx.x;  // 32 threads, 2 floats each
    if (i % 2 == 0) {
        cp_async_ca<4>(&s[2 * i], &x[2 * i]);
        cp_async_ca<4>(&s[2 * i + 1], &x[2 * i + 1]);
    } else {
        cp_async_ca<8>(&s[2 * i], &x[2 * i]);
    }
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    out[63 - 2 * i] = s[2 * i];
    out[62 - 2 * i] = s[2 * i + 1];
}

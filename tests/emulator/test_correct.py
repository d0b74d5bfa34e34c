"""Correct kernels give NumPy's answers."""
from __future__ import annotations

import numpy as np
import pytest

from emulator_helpers import VECTOR_ADD, kernel, kernel_file


def test_vector_add(rng):
    n = 1000
    a, b = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    c = np.zeros(n, np.float32)
    report = kernel(VECTOR_ADD, "vector_add").launch((4, 1, 1), (256, 1, 1), [a, b, c, np.int32(n)], 0)
    np.testing.assert_array_equal(c, a + b)
    assert report.printed == "" and report.io is None and report.seconds > 0


def test_2d_indexing_and_3d_block(rng):
    code = """
    extern "C" __global__ void index2d(float* out, int rows, int cols) {
        int c = blockIdx.x * blockDim.x + threadIdx.x;
        int r = blockIdx.y * blockDim.y + threadIdx.y;
        if (r < rows && c < cols) out[r * cols + c] = r * 1000 + c + threadIdx.z * 0.5f;
    }
    """
    rows, cols = 37, 45
    out = np.zeros((rows, cols), np.float32)
    kernel(code, "index2d").launch((3, 5, 1), (16, 8, 1), [out, np.int32(rows), np.int32(cols)], 0)
    r, c = np.mgrid[0:rows, 0:cols]
    np.testing.assert_array_equal(out, r * 1000 + c)


def test_grid_and_block_builtins():
    code = """
    extern "C" __global__ void dims(int* out) {
        int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
        int b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
        int per = blockDim.x * blockDim.y * blockDim.z;
        out[b * per + t] = b * 100 + t + warpSize * 0;
        if (t == 0 && b == 0) out[gridDim.x * gridDim.y * gridDim.z * per] = warpSize;
    }
    """
    grid, block = (2, 3, 2), (4, 2, 3)
    per, nb = 24, 12
    out = np.zeros(nb * per + 1, np.int32)
    kernel(code, "dims").launch(grid, block, [out], 0)
    expected = np.array([b * 100 + t for b in range(nb) for t in range(per)] + [32], np.int32)
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("size", [(64, 64, 64), (50, 70, 33)])
def test_tiled_matmul_static_shared(rng, size):
    m, n, k = size
    a, b = rng.random((m, k), dtype=np.float32), rng.random((k, n), dtype=np.float32)
    c = np.zeros((m, n), np.float32)
    kern = kernel_file("matmul.cu", "matmul_tiled")
    assert kern.static_shared_bytes == 2 * 16 * 16 * 4
    kern.launch(((n + 15) // 16, (m + 15) // 16, 1), (16, 16, 1), [a, b, c, np.int32(m), np.int32(n), np.int32(k)], 0,
                race_check=True)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)


def test_dynamic_extern_shared_reverse(rng):
    code = """
    extern "C" __global__ void reverse_blocks(const float* x, float* y, int n) {
        extern __shared__ float buf[];
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        buf[threadIdx.x] = x[i];
        __syncthreads();
        y[i] = buf[blockDim.x - 1 - threadIdx.x];
    }
    """
    x = rng.random(512, dtype=np.float32)
    y = np.zeros_like(x)
    kernel(code, "reverse_blocks").launch((4, 1, 1), (128, 1, 1), [x, y, np.int32(512)], 128 * 4)
    np.testing.assert_array_equal(y, x.reshape(4, 128)[:, ::-1].reshape(-1))


def test_extern_shared_at_namespace_scope_and_two_views():
    code = """
    extern __shared__ int pool[];
    extern "C" __global__ void two_views(int* out) {
        extern __shared__ __align__(16) unsigned char raw[];
        int t = threadIdx.x;
        pool[t] = t * 3;
        __syncthreads();
        int* again = reinterpret_cast<int*>(raw);
        out[t] = again[(t + 1) % blockDim.x];
    }
    """
    out = np.zeros(64, np.int32)
    kernel(code, "two_views").launch((1, 1, 1), (64, 1, 1), [out], 64 * 4)
    np.testing.assert_array_equal(out, (np.arange(1, 65) % 64) * 3)


def test_warp_shuffle_reductions_with_width():
    code = """
    extern "C" __global__ void segment_sums(const float* x, float* sums, float* bcast, float* up, int* lanes) {
        int t = threadIdx.x;
        float v = x[t];
        for (int off = 4; off > 0; off /= 2) v += __shfl_down_sync(0xffffffff, v, off, 8);
        if (t % 8 == 0) sums[t / 8] = v;
        float w = x[t];
        for (int m = 8; m > 0; m /= 2) w += __shfl_xor_sync(0xffffffff, w, m, 16);
        bcast[t] = __shfl_sync(0xffffffff, w, 3, 16);
        up[t] = __shfl_up_sync(0xffffffff, x[t], 1, 8);
        lanes[t] = __shfl_sync(0xffffffff, t, t + 1);
    }
    """
    x = np.arange(64, dtype=np.float32)
    sums, bcast, up = np.zeros(8, np.float32), np.zeros(64, np.float32), np.zeros(64, np.float32)
    lanes = np.zeros(64, np.int32)
    kernel(code, "segment_sums").launch((1, 1, 1), (64, 1, 1), [x, sums, bcast, up, lanes], 0)
    np.testing.assert_array_equal(sums, x.reshape(8, 8).sum(axis=1))
    np.testing.assert_array_equal(bcast, np.repeat(x.reshape(4, 16).sum(axis=1), 16))
    expected_up = x.copy()
    expected_up[np.arange(64) % 8 != 0] = x[np.arange(64) % 8 != 0] - 1
    np.testing.assert_array_equal(up, expected_up)
    t = np.arange(64)
    np.testing.assert_array_equal(lanes, (t // 32) * 32 + (t + 1) % 32)


def test_ballot_any_all_activemask_syncwarp():
    code = """
    extern "C" __global__ void votes(const int* x, unsigned* ballot, int* any, int* all, unsigned* active, int* half) {
        int t = threadIdx.x;
        int p = x[t] > 0;
        unsigned b = __ballot_sync(FULL_MASK, p);
        int a = __any_sync(FULL_MASK, p);
        int l = __all_sync(FULL_MASK, p);
        __syncwarp();
        if (t % 32 == 0) { ballot[t / 32] = b; any[t / 32] = a; all[t / 32] = l; active[t / 32] = __activemask(); }
        if (t < 16) half[t] = __popc(__ballot_sync(0x0000ffffu, t % 2 == 0));
    }
    """
    x = np.zeros(64, np.int32)
    x[[0, 5, 31]] = 1
    x[32:] = 1
    ballot, active = np.zeros(2, np.uint32), np.zeros(2, np.uint32)
    any_, all_, half = np.zeros(2, np.int32), np.zeros(2, np.int32), np.zeros(16, np.int32)
    kernel(code, "votes").launch((1, 1, 1), (64, 1, 1), [x, ballot, any_, all_, active, half], 0)
    assert ballot.tolist() == [(1 << 0) | (1 << 5) | (1 << 31), 0xFFFFFFFF]
    assert any_.tolist() == [1, 1] and all_.tolist() == [0, 1]
    assert active.tolist() == [0xFFFFFFFF, 0xFFFFFFFF]
    assert half.tolist() == [8] * 16


def test_block_reduction_shared_and_warp():
    code = """
    __device__ __forceinline__ float warp_sum(float v) {
        #pragma unroll
        for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(FULL_MASK, v, off);
        return v;
    }
    extern "C" __global__ void __launch_bounds__(256) block_sum(const float* __restrict__ x, float* out, int n) {
        __shared__ float partial[32];
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        float v = i < n ? __ldg(&x[i]) : 0.0f;
        v = warp_sum(v);
        if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
        __syncthreads();
        if (threadIdx.x < 32) {
            v = threadIdx.x < blockDim.x / 32 ? partial[threadIdx.x] : 0.0f;
            v = warp_sum(v);
            if (threadIdx.x == 0) out[blockIdx.x] = v;
        }
    }
    """
    x = np.arange(1000, dtype=np.float32)
    out = np.zeros(4, np.float32)
    kernel(code, "block_sum").launch((4, 1, 1), (256, 1, 1), [x, out, np.int32(1000)], 0)
    padded = np.concatenate([x, np.zeros(24, np.float32)])
    np.testing.assert_array_equal(out, padded.reshape(4, 256).sum(axis=1))


def test_atomics_float_int_and_cas_loop():
    code = """
    __device__ float atomic_max_float(float* addr, float v) {
        int* p = (int*)addr;
        int old = *p, assumed;
        do {
            assumed = old;
            old = atomicCAS(p, assumed, __float_as_int(fmaxf(v, __int_as_float(assumed))));
        } while (assumed != old);
        return __int_as_float(old);
    }
    extern "C" __global__ void atomics(const float* x, float* fsum, int* count, unsigned* umax, int* imin, float* fmax, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i >= n) return;
        atomicAdd(fsum, x[i]);
        atomicAdd(count, 1);
        atomicSub(count + 1, 2);
        atomicMax(umax, (unsigned)i);
        atomicMin(imin, -i);
        atomic_max_float(fmax, x[i]);
        atomicExch(count + 2, 7);
    }
    """
    n = 3000
    x = (np.arange(n, dtype=np.float32) % 7) * 0.5
    fsum, fmax = np.zeros(1, np.float32), np.full(1, -np.inf, np.float32)
    count, umax, imin = np.zeros(3, np.int32), np.zeros(1, np.uint32), np.zeros(1, np.int32)
    kernel(code, "atomics").launch((12, 1, 1), (256, 1, 1), [x, fsum, count, umax, imin, fmax, np.int32(n)], 0,
                                   race_check=True)
    assert fsum[0] == pytest.approx(float(x.sum()), rel=1e-5)
    assert count.tolist() == [n, -2 * n, 7]
    assert umax[0] == n - 1 and imin[0] == -(n - 1) and fmax[0] == x.max()


def test_spin_lock_within_a_block():
    code = """
    extern "C" __global__ void locked(int* lock, int* total) {
        while (atomicCAS(lock, 0, 1) != 0) {}
        *total += threadIdx.x;
        __threadfence();
        atomicExch(lock, 0);
    }
    """
    lock, total = np.zeros(1, np.int32), np.zeros(1, np.int32)
    kernel(code, "locked").launch((1, 1, 1), (64, 1, 1), [lock, total], 0, time_limit=5)
    assert total[0] == sum(range(64))


def test_templates_defines_constexpr_and_options():
    code = """
    #ifndef SCALE
    #define SCALE 1
    #endif
    constexpr int kRepeat = 3;
    template <typename T, int N>
    __host__ __device__ inline T times(T v) { return v * N; }
    struct Pair { float a, b; };
    extern "C" __global__ void templated(const float* x, float* y, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        Pair p{x[i], 1.0f};
        if (i < n) y[i] = times<float, kRepeat>(p.a) * SCALE + p.b * ceil_div(n, 100);
    }
    """
    x = np.arange(256, dtype=np.float32)
    for options, scale in [((), 1), (("-DSCALE=2", "-std=c++17", "--use_fast_math"), 2),
                           (("--define-macro", "SCALE=5", "-arch=sm_90"), 5)]:
        y = np.zeros_like(x)
        kernel(code, "templated", options).launch((1, 1, 1), (256, 1, 1), [x, y, np.int32(256)], 0)
        np.testing.assert_array_equal(y, x * 3 * scale + 3)


def test_include_path_option(tmp_path):
    (tmp_path / "tile.h").write_text("#define TILE_FROM_HEADER 7\n")
    code = """
    #include "tile.h"
    extern "C" __global__ void from_header(int* out) { out[threadIdx.x] = TILE_FROM_HEADER; }
    """
    out = np.zeros(4, np.int32)
    kernel(code, "from_header", (f"-I{tmp_path}",)).launch((1, 1, 1), (4, 1, 1), [out], 0)
    assert out.tolist() == [7] * 4


def test_printf_is_captured_in_block_order():
    code = """
    extern "C" __global__ void hello(int n) {
        if (threadIdx.x < 2) printf("block %d thread %d n=%d x=%.2f\\n", blockIdx.x, threadIdx.x, n, 1.5f);
        __syncthreads();
        if (threadIdx.x == 0) printf("block %d done\\n", blockIdx.x);
    }
    """
    report = kernel(code, "hello").launch((3, 1, 1), (32, 1, 1), [np.int32(9)], 0)
    expected = "".join(f"block {b} thread {t} n=9 x=1.50\n" for b in range(3) for t in range(2))
    expected = "".join(
        f"block {b} thread 0 n=9 x=1.50\nblock {b} thread 1 n=9 x=1.50\nblock {b} done\n" for b in range(3)
    )
    assert report.printed == expected


def test_kernel_names_that_clash_with_libc():
    code = """
    extern "C" __global__ void div(const float* a, const float* b, float* c) { c[threadIdx.x] = a[threadIdx.x] / b[threadIdx.x]; }
    extern "C" __global__ void exp(float* x) { x[threadIdx.x] = expf(x[threadIdx.x]); }
    extern "C" {
    __global__ void abs(int* x) { x[threadIdx.x] = ::abs(x[threadIdx.x] - 2); }
    }
    """
    a, b, c = np.full(8, 6, np.float32), np.full(8, 3, np.float32), np.zeros(8, np.float32)
    kernel(code, "div").launch((1, 1, 1), (8, 1, 1), [a, b, c], 0)
    np.testing.assert_array_equal(c, 2)
    x = np.zeros(8, np.float32)
    kernel(code, "exp").launch((1, 1, 1), (8, 1, 1), [x], 0)
    np.testing.assert_array_equal(x, 1)
    y = np.arange(8, dtype=np.int32)
    kernel(code, "abs").launch((1, 1, 1), (8, 1, 1), [y], 0)
    np.testing.assert_array_equal(y, np.abs(np.arange(8) - 2))


def test_uninitialised_shared_memory_reads_as_nan():
    code = """
    extern "C" __global__ void forgot_to_load(float* out) {
        __shared__ float tile[64];
        if (threadIdx.x < 32) tile[threadIdx.x] = 1.0f;
        __syncthreads();
        out[blockIdx.x * 64 + threadIdx.x] = tile[threadIdx.x] * 2.0f;
        __syncthreads();
        tile[threadIdx.x] = 5.0f;  // the next block must not see this
    }
    """
    out = np.zeros(128, np.float32)
    kernel(code, "forgot_to_load").launch((2, 1, 1), (64, 1, 1), [out], 0)
    out = out.reshape(2, 64)
    assert (out[:, :32] == 2).all() and np.isnan(out[:, 32:]).all()


def test_syncthreads_count_and_or_clock_and_misc():
    code = """
    extern "C" __global__ void misc(int* out) {
        int t = threadIdx.x;
        int c = __syncthreads_count(t % 3 == 0);
        int a = __syncthreads_and(t < 100);
        int o = __syncthreads_or(t == 5);
        long long t0 = clock64();
        clock_t t1 = clock();
        if (t == 0) { out[0] = c; out[1] = a; out[2] = o; out[3] = clock64() >= t0 && t1 > 0; out[4] = __mul24(3, 4); }
    }
    """
    out = np.zeros(5, np.int32)
    kernel(code, "misc").launch((1, 1, 1), (64, 1, 1), [out], 0)
    assert out.tolist() == [22, 1, 1, 1, 12]


def test_scalar_parameter_types():
    code = """
    extern "C" __global__ void scalars(double* out, double d, long long big, unsigned u, short s, char c, bool flag, float f) {
        out[0] = d; out[1] = (double)big; out[2] = u; out[3] = s; out[4] = c; out[5] = flag; out[6] = f;
    }
    """
    out = np.zeros(7, np.float64)
    args = [out, np.float64(2.5), np.int64(1 << 40), np.uint32(4000000000), np.int16(-7), np.int8(-3), np.bool_(True),
            np.float32(0.25)]
    kernel(code, "scalars").launch((1, 1, 1), (1, 1, 1), args, 0)
    assert out.tolist() == [2.5, float(1 << 40), 4000000000.0, -7.0, -3.0, 1.0, 0.25]


def test_half_and_bfloat16_pointers():
    code = """
    #include <cuda_fp16.h>
    #include <cuda_bf16.h>
    extern "C" __global__ void halves(const __half* h, const __nv_bfloat16* b, float* out, __half* h2) {
        int t = threadIdx.x;
        out[t] = __half2float(h[t]) + __bfloat162float(b[t]);
        h2[t] = __float2half(out[t] * 2.0f);
    }
    """
    h = np.arange(16, dtype=np.float16)
    b = (np.arange(16, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)  # bfloat16 bits
    out, h2 = np.zeros(16, np.float32), np.zeros(16, np.float16)
    kernel(code, "halves").launch((1, 1, 1), (16, 1, 1), [h, b, out, h2], 0)
    np.testing.assert_array_equal(out, 2 * np.arange(16))
    np.testing.assert_array_equal(h2, 4 * np.arange(16))


def test_flash_attention_forward(rng):
    s, d = 256, 64
    q, k, v = (rng.standard_normal((s, d), dtype=np.float32) for _ in range(3))
    o = np.zeros((s, d), np.float32)
    scale = np.float32(1 / np.sqrt(d))
    kernel_file("flash_fwd.cu", "flash_fwd").launch((s // 64, 1, 1), (64, 1, 1), [q, k, v, o, np.int32(s), scale], 0)
    logits = (q @ k.T) * scale
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    np.testing.assert_allclose(o, (p / p.sum(axis=1, keepdims=True)) @ v, atol=1e-5)


def test_zero_sized_array_and_empty_grid_dims():
    code = """
    extern "C" __global__ void maybe(float* x, int n) { if (threadIdx.x < n) x[threadIdx.x] = 1; }
    """
    x = np.zeros(0, np.float32)
    kernel(code, "maybe").launch((1, 1, 1), (32, 1, 1), [x, np.int32(0)], 0)

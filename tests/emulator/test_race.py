"""The race detector behind race_check=True: unordered accesses (at least one a plain write) are
reported deterministically, with array, index, both threads and lines; ordered ones are not."""
from __future__ import annotations

import numpy as np
import pytest

from emulator_helpers import assert_healthy, kernel, kernel_file
from grader.emulator import _toolchain
from grader.errors import RaceConditionError

pytestmark = pytest.mark.skipif(_toolchain.clang() is None, reason="the race detector needs clang-16")


def race(kern, grid, block, args, shared_mem=0) -> RaceConditionError:
    with pytest.raises(RaceConditionError) as info:
        kern.launch(grid, block, args, shared_mem, race_check=True)
    assert_healthy()
    return info.value


ACCUMULATE = """
extern "C" __global__ void accumulate(const float* x, float* total, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        ATOMIC
    }
}
"""


def accumulate(update: str):
    return kernel(ACCUMULATE.replace("ATOMIC", update), "accumulate")


def test_plain_add_within_one_block():
    x, total = np.ones(64, np.float32), np.zeros(1, np.float32)
    e = race(accumulate("total[0] += v;"), (1, 1, 1), (64, 1, 1), [x, total, np.int32(64)])
    msg = str(e)
    assert msg.startswith("accumulate: race condition on total[0]: thread (")
    assert msg.count("of block (0,0,0)") == 2
    assert msg.count("line 6: `total[0] += v;`") == 2
    assert "read-write race" in msg and "read-modify-write like +=" in msg
    assert "atomicAdd(&total[i], x)" in msg and "one thread own each element" in msg
    assert e.line == 6 and e.block == (0, 0, 0)


def test_plain_add_is_caught_the_same_way_every_time():
    x, total = np.ones(64, np.float32), np.zeros(1, np.float32)
    messages = {str(race(accumulate("total[0] += v;"), (1, 1, 1), (64, 1, 1), [x, total, np.int32(64)]))
                for _ in range(3)}
    assert len(messages) == 1


def test_plain_add_across_blocks():
    # One thread per block: nothing races inside a block, only between blocks.
    x, total = np.ones(4, np.float32), np.zeros(1, np.float32)
    e = race(accumulate("total[0] += v;"), (4, 1, 1), (1, 1, 1), [x, total, np.int32(4)])
    msg = str(e)
    assert "race condition on total[0]" in msg
    assert "thread (0,0,0) of block (2,0,0)" in msg and "thread (0,0,0) of block (3,0,0)" in msg
    assert "threads of different blocks are never ordered" in msg and "atomicAdd" in msg


def test_a_store_that_maps_two_lanes_to_one_element_is_named_as_an_index_error():
    # The lane -> row mapping of a fragment written with t for g: lanes 0 and 4 both store row 0.
    code = """
    extern "C" __global__ void rows(float* out) {
        const int lane = threadIdx.x % 32, t = lane % 4;
        out[t * 8 + lane / 16] = lane;
    }
    """
    e = race(kernel(code, "rows"), (1, 1, 1), (32, 1, 1), [np.zeros(32, np.float32)])
    msg = str(e)
    assert "write-write race" in msg and "several threads store to the same element from one line" in msg
    assert "the index maps two threads to one element" in msg and "if (t == 0)" in msg
    assert "updates get lost" not in msg


def test_plain_write_across_blocks_is_write_write():
    code = """
    extern "C" __global__ void last_wins(float* out) {
        if (threadIdx.x == 0) out[0] = blockIdx.x;
    }
    """
    e = race(kernel(code, "last_wins"), (3, 1, 1), (32, 1, 1), [np.zeros(1, np.float32)])
    assert "write-write race" in str(e) and "out[0]" in str(e)


@pytest.mark.parametrize("update", ["atomicAdd(total, v);", "atomicAdd(&total[0], v); atomicMax((int*)total + 1, 1);"])
def test_atomic_add_is_no_race(update):
    n = 3000
    x, total = np.full(n, 0.5, np.float32), np.zeros(2, np.float32)
    accumulate(update).launch((12, 1, 1), (256, 1, 1), [x, total, np.int32(n)], 0, race_check=True)
    assert total[0] == pytest.approx(n * 0.5)


def test_atomic_against_a_plain_write():
    code = """
    extern "C" __global__ void mixed(float* total) {
        if (threadIdx.x == 0) total[0] = 0.0f;
        else atomicAdd(total, 1.0f);
    }
    """
    e = race(kernel(code, "mixed"), (1, 1, 1), (32, 1, 1), [np.zeros(1, np.float32)])
    assert "race between an atomic and a plain write" in str(e) and "atomically updates it" in str(e)


def test_cas_loop_reading_the_old_value_plainly_is_no_race():
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
    extern "C" __global__ void fmax_all(const float* x, float* m, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) atomic_max_float(m, x[i]);
    }
    """
    x = np.arange(1000, dtype=np.float32) % 97
    m = np.full(1, -np.inf, np.float32)
    kernel(code, "fmax_all").launch((4, 1, 1), (256, 1, 1), [x, m, np.int32(1000)], 0, race_check=True)
    assert m[0] == x.max()


def matmul_args(rng, size=64):
    a, b = rng.random((size, size), dtype=np.float32), rng.random((size, size), dtype=np.float32)
    return a, b, [a, b, np.zeros((size, size), np.float32), np.int32(size), np.int32(size), np.int32(size)]


def test_tiled_matmul_without_second_sync_races_on_shared_memory(rng):
    _, _, args = matmul_args(rng)
    e = race(kernel_file("matmul.cu", "matmul_tiled", ("-DSKIP_SECOND_SYNC",)), (4, 4, 1), (16, 16, 1), args)
    msg = str(e)
    assert "race condition on shared memory (As, flat element" in msg or "race condition on shared memory (Bs, flat element" in msg
    assert "read-write race" in msg and "a __syncthreads() is missing between these two accesses" in msg
    assert msg.count("of block (") == 2 and msg.count("(line ") == 2
    assert "`for (int k = 0; k < TILE; ++k) acc += As[ty][k] * Bs[k][tx];`" in msg


def test_correct_tiled_matmul_is_no_race(rng):
    a, b, args = matmul_args(rng)
    kernel_file("matmul.cu", "matmul_tiled").launch((4, 4, 1), (16, 16, 1), args, 0, race_check=True)
    np.testing.assert_allclose(args[2], a @ b, rtol=1e-5)


def test_warp_shuffle_reduction_is_no_race():
    code = """
    extern "C" __global__ void row_sums(const float* x, float* out, int n) {
        __shared__ float partial[8];
        float v = 0.0f;
        for (int i = threadIdx.x; i < n; i += blockDim.x) v += x[blockIdx.x * n + i];
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
        int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
        if (lane == 0) partial[warp] = v;
        __syncthreads();
        if (warp == 0) {
            v = lane < blockDim.x / 32 ? partial[lane] : 0.0f;
            for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
            if (lane == 0) out[blockIdx.x] = v;
        }
    }
    """
    x = np.arange(4 * 1000, dtype=np.float32).reshape(4, 1000) % 13
    out = np.zeros(4, np.float32)
    kernel(code, "row_sums").launch((4, 1, 1), (256, 1, 1), [x, out, np.int32(1000)], 0, race_check=True)
    np.testing.assert_allclose(out, x.sum(axis=1), rtol=1e-5)


NEIGHBOUR = """
extern "C" __global__ void neighbour(const float* x, float* y) {
    __shared__ float s[64];
    int t = threadIdx.x;
    s[t] = x[t];
    SYNC
    y[t] = s[t ^ 1];
}
"""


def test_neighbour_slot_after_syncwarp_is_no_race():
    x, y = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
    kernel(NEIGHBOUR.replace("SYNC", "__syncwarp();"), "neighbour").launch((1, 1, 1), (64, 1, 1), [x, y], 0,
                                                                           race_check=True)
    np.testing.assert_array_equal(y, x.reshape(32, 2)[:, ::-1].reshape(-1))


def test_neighbour_slot_without_syncwarp_races():
    x, y = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
    e = race(kernel(NEIGHBOUR.replace("SYNC", ""), "neighbour"), (1, 1, 1), (64, 1, 1), [x, y])
    msg = str(e)
    assert "race condition on shared memory (s, flat element 62 of 4-byte elements)" in msg
    assert "same block and warp, with no __syncthreads(), __syncwarp() or warp collective between them" in msg
    assert "line 5: `s[t] = x[t];`" in msg and "line 7: `y[t] = s[t ^ 1];`" in msg
    assert "a __syncthreads() is missing between these two accesses (or a __syncwarp()" in msg


def test_syncwarp_does_not_order_different_warps():
    code = NEIGHBOUR.replace("SYNC", "__syncwarp();").replace("s[t ^ 1]", "s[t ^ 32]")
    x, y = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
    e = race(kernel(code, "neighbour"), (1, 1, 1), (64, 1, 1), [x, y])
    assert "same block, with no __syncthreads() between them" in str(e)


def test_partial_mask_syncwarp_orders_only_its_lanes():
    # Lanes 0-15 and 16-31 sync separately: lane 0 reading lane 1's slot is ordered, reading
    # lane 16's is not.
    code = NEIGHBOUR.replace("SYNC", "__syncwarp(t % 32 < 16 ? 0x0000ffffu : 0xffff0000u);")
    x, y = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
    kernel(code, "neighbour").launch((1, 1, 1), (64, 1, 1), [x, y], 0, race_check=True)
    e = race(kernel(code.replace("s[t ^ 1]", "s[t ^ 16]"), "neighbour"), (1, 1, 1), (64, 1, 1), [x, y])
    assert "same block and warp, with no __syncthreads(), __syncwarp()" in str(e)


def test_dynamic_shared_memory_race():
    code = """
    extern "C" __global__ void shift(const float* x, float* y) {
        extern __shared__ float buf[];
        buf[threadIdx.x] = x[threadIdx.x];
        y[threadIdx.x] = buf[(threadIdx.x + 40) % 64];
    }
    """
    x, y = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
    e = race(kernel(code, "shift"), (1, 1, 1), (64, 1, 1), [x, y], shared_mem=64 * 4)
    assert "race condition on shared memory (extern __shared__, flat element" in str(e)


def test_shared_memory_is_per_block():
    # Every block writes and reads the same shared slot: never a race between blocks.
    code = """
    extern "C" __global__ void per_block(float* out) {
        __shared__ float s;
        if (threadIdx.x == 0) s = blockIdx.x;
        __syncthreads();
        out[blockIdx.x * blockDim.x + threadIdx.x] = s;
    }
    """
    out = np.zeros(4 * 32, np.float32)
    kernel(code, "per_block").launch((4, 1, 1), (32, 1, 1), [out], 0, race_check=True)
    np.testing.assert_array_equal(out, np.repeat(np.arange(4, dtype=np.float32), 32))


def test_float4_accesses_and_reads_by_many_threads_are_no_race():
    code = """
    extern "C" __global__ void broadcast(const float4* x, float4* y) {
        __shared__ float4 first;
        if (threadIdx.x == 0) first = x[0];
        __syncthreads();
        float4 f = first, v = x[blockIdx.x * blockDim.x + threadIdx.x];
        y[blockIdx.x * blockDim.x + threadIdx.x] = make_float4(v.x + f.x, v.y + f.y, v.z + f.z, v.w + f.w);
    }
    """
    x = np.arange(2 * 64 * 4, dtype=np.float32)
    y = np.zeros_like(x)
    kernel(code, "broadcast").launch((2, 1, 1), (64, 1, 1), [x, y], 0, race_check=True)
    np.testing.assert_array_equal(y.reshape(-1, 4), x.reshape(-1, 4) + x[:4])


def test_atomic_counts_as_one_read_and_one_write():
    n = 256
    x, total = np.ones(n, np.float32), np.zeros(2, np.float32)
    rep = accumulate("atomicAdd(total, v); atomicMax((int*)total + 1, 1);").launch(
        (1, 1, 1), (n, 1, 1), [x, total, np.int32(n)], 0, count_io=True)
    assert rep.io.per_array["total"] == (2 * 4 * n, 2 * 4 * n)
    assert rep.io.per_array["x"] == (4 * n, 0)

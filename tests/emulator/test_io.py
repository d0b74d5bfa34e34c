"""count_io: bytes moved through global and shared memory, exactly."""
from __future__ import annotations

import numpy as np
import pytest

from emulator_helpers import VECTOR_ADD, kernel, kernel_file
from grader.emulator import _toolchain

pytestmark = pytest.mark.skipif(_toolchain.clang() is None, reason="count_io needs clang-16 (apt-get install clang-16)")


def test_vector_add_counts_exactly():
    n = 100
    a, b, c = np.arange(n, dtype=np.float32), np.ones(n, np.float32), np.zeros(n, np.float32)
    report = kernel(VECTOR_ADD, "vector_add").launch((1, 1, 1), (128, 1, 1), [a, b, c, np.int32(n)], 0, count_io=True)
    io = report.io
    assert (io.global_read, io.global_written) == (800, 400)
    assert (io.shared_read, io.shared_written) == (0, 0)
    assert io.per_array == {"a": (400, 0), "b": (400, 0), "c": (0, 400)}
    np.testing.assert_array_equal(c, a + b)  # the instrumented build computes the same


def test_tiled_matmul_reads_global_memory_tile_times_less(rng):
    m = n = k = 64
    tile = 16
    a, b = rng.random((m, k), dtype=np.float32), rng.random((k, n), dtype=np.float32)
    grid, block = (n // tile, m // tile, 1), (tile, tile, 1)

    c = np.zeros((m, n), np.float32)
    args = [a, b, c, np.int32(m), np.int32(n), np.int32(k)]
    naive = kernel_file("matmul.cu", "matmul_naive").launch(grid, block, args, 0, count_io=True).io
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)
    # Every output element reads a row of A and a column of B: K floats each.
    assert naive.per_array["A"] == (m * n * k * 4, 0)
    assert naive.per_array["B"] == (m * n * k * 4, 0)
    assert naive.per_array["C"] == (0, m * n * 4)
    assert (naive.shared_read, naive.shared_written) == (0, 0)

    c[:] = 0
    tiled = kernel_file("matmul.cu", "matmul_tiled").launch(grid, block, args, 0, count_io=True).io
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)
    steps = k // tile
    # Each thread loads one element of A and one of B per tile step...
    assert tiled.per_array["A"] == (m * n * steps * 4, 0)
    assert tiled.per_array["B"] == (m * n * steps * 4, 0)
    assert tiled.per_array["C"] == (0, m * n * 4)
    # ...stores them to shared memory, and reads a TILE-long row of As and column of Bs per step.
    assert tiled.shared_written == m * n * steps * 2 * 4
    assert tiled.shared_read == m * n * steps * 2 * tile * 4
    assert naive.global_read == tile * tiled.global_read


def test_atomics_and_dynamic_shared_are_counted():
    code = """
    extern "C" __global__ void hist(const int* x, int* bins, int n) {
        extern __shared__ int local[];
        if (threadIdx.x < 4) local[threadIdx.x] = 0;
        __syncthreads();
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) atomicAdd(&local[x[i]], 1);
        __syncthreads();
        if (threadIdx.x < 4) atomicAdd(&bins[threadIdx.x], local[threadIdx.x]);
    }
    """
    n = 64
    x = np.arange(n, dtype=np.int32) % 4
    bins = np.zeros(4, np.int32)
    io = kernel(code, "hist").launch((2, 1, 1), (32, 1, 1), [x, bins, np.int32(n)], 16, count_io=True).io
    assert bins.tolist() == [16] * 4
    assert io.per_array["x"] == (n * 4, 0)
    assert io.per_array["bins"] == (2 * 4 * 4, 2 * 4 * 4)  # an atomic reads and writes
    # shared: 4 zeroing stores, n atomics (read + write), 4 reads for the flush, per block
    assert io.shared_written == 2 * 4 * 4 + n * 4
    assert io.shared_read == n * 4 + 2 * 4 * 4


def test_count_io_off_gives_none():
    x = np.zeros(4, np.float32)
    report = kernel(VECTOR_ADD, "vector_add").launch((1, 1, 1), (4, 1, 1), [x, x.copy(), x.copy(), np.int32(4)], 0)
    assert report.io is None

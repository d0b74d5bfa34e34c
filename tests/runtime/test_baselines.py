"""grader.baselines: what released notebooks need from the package instead of the repository."""
import json

import numpy as np
import pytest

import grader
from grader import reference as ref
from grader.baselines import naive_attention, own_kernel


@pytest.mark.parametrize("N,d", [(96, 32), (37, 5)])
def test_naive_attention_is_right_and_moves_the_formula_bytes(N, d):
    rng = np.random.default_rng(1)
    Q, K, V = (rng.standard_normal((1, 1, N, d)).astype(np.float32) for _ in range(3))
    scale = np.float32(1 / np.sqrt(d))
    O_ref, _ = ref.attention_forward(Q, K, V, scale=float(scale))
    O = grader.empty((N, d))
    launch = naive_attention(*(grader.to_device(a[0, 0]) for a in (Q, K, V)), O, N, d, scale)
    on_cpu = grader.backend() == "cpu"
    reports = launch(count_io=on_cpu)
    assert len(reports) == 3
    assert np.abs(grader.to_host(O) - O_ref[0, 0]).max() < 1e-5
    if on_cpu and grader.emulator._toolchain.clang():
        # the formula module 04 prints: reads 2N²d + 3N² + 2N²d floats, writes 2N² + Nd
        assert sum(r.io.global_read for r in reports) == 4 * (4 * N * N * d + 3 * N * N)
        assert sum(r.io.global_written for r in reports) == 4 * (2 * N * N + N * d)


def _notebook(tmp_path, module, source):
    folder = tmp_path / module
    folder.mkdir()
    nb = {"cells": [{"cell_type": "code", "metadata": {}, "source": source, "outputs": [], "execution_count": None}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (folder / "x.ipynb").write_text(json.dumps(nb))


def test_own_kernel_reads_the_students_notebook(tmp_path):
    _notebook(tmp_path, "00_mine", '%%cuda twice\nextern "C" __global__ void twice(float* x, int n) {\n'
                                   '    int i = threadIdx.x; if (i < n) x[i] *= 2.0f;\n}\n')
    _notebook(tmp_path, "01_stub", '%%cuda twice\nextern "C" __global__ void twice(float* x, int n) {\n'
                                   '    // YOUR CODE HERE\n}\n')
    k = own_kernel("00_mine", "twice", folder=tmp_path)
    x = np.arange(4, dtype=np.float32)
    xd = grader.to_device(x)
    k(1, 32, (xd, np.int32(4)))
    assert grader.to_host(xd).tolist() == [0, 2, 4, 6]
    assert own_kernel("01_stub", "twice", folder=tmp_path) is None
    assert own_kernel("02_missing", "twice", folder=tmp_path) is None
    assert own_kernel("00_mine", "other", folder=tmp_path) is None

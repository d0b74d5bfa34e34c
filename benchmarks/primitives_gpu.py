"""The performance primitives on a real GPU, from the same sources the emulator tests run.

Tensor cores: every case of tests/emulator/kernels/tensor/cases.py (mma.sync in all four forms,
the six ldmatrix forms, an mma + ldmatrix matmul, WMMA in f16/bf16 and every row/column-major
combination). Async copies: the kernels of tests/emulator/kernels/async_*.cu (a double-buffered
cp.async matmul, the same in CUDA's __pipeline_* spelling, the zero-fill tail, 4/8-byte copies).
Each runs through grader.RawKernel on the GPU and must give bit for bit the arrays the emulator
tests assert. Inputs are small integers or multiples of powers of two, so every sum is exact.

    GRADER_BACKEND=gpu python benchmarks/primitives_gpu.py [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "emulator" / "kernels" / "tensor"))
import grader  # noqa: E402
from cases import cases  # noqa: E402


KERNELS = ROOT / "tests" / "emulator" / "kernels"


def async_cases():
    """(id, source, kernel, grid, block, args, {arg index: expected}) for the cp.async kernels."""
    rng = np.random.default_rng(0)
    out = []
    for file, name in (("async_copy.cu", "matmul_async"), ("async_pipeline.cu", "matmul_pipeline")):
        for n in (64, 256):
            a, b = (rng.integers(-4, 5, (n, n)).astype(np.float32) for _ in range(2))
            out.append((f"{name}_{n}", (KERNELS / file).read_text(), name, (n // 16, n // 16), (16, 16),
                        [a, b, np.zeros((n, n), np.float32), np.int32(n)], {2: a @ b}))
    x = np.arange(1, 38, dtype=np.float32)
    out.append(("cp_async_zfill_tail", (KERNELS / "async_copy.cu").read_text(), "copy_tail", (1,), (16,),
                [x, np.full(64, 7, np.float32), np.int32(37)], {1: np.concatenate([x, np.zeros(27, np.float32)])}))
    x = np.arange(64, dtype=np.float32)
    out.append(("cp_async_ca_4_8", (KERNELS / "async_copy.cu").read_text(), "copy_ca", (1,), (32,),
                [x, np.zeros(64, np.float32)], {1: x[::-1].copy()}))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    a = ap.parse_args()
    rows, failed = [], 0
    for case in cases():
        kernel = grader.RawKernel(case.source(), case.kernel)
        args = [grader.to_device(x) if isinstance(x, np.ndarray) else x for x in case.args]
        kernel(case.grid, case.block, tuple(args))
        same = True
        for index, want in case.expected.items():
            got = grader.to_host(args[index])
            same &= bool(np.array_equal(got.view(np.uint8), np.ascontiguousarray(want).view(np.uint8)))
        failed += not same
        rows.append({"case": case.id, "bit_identical": same})
        print(f"{case.id:40s} {'bit-identical' if same else 'DIFFERS'}")
    for cid, source, name, grid, block, host, expected in async_cases():
        kernel = grader.RawKernel(source, name)
        args = [grader.to_device(x) if isinstance(x, np.ndarray) else x for x in host]
        kernel(grid, block, tuple(args))
        same = all(np.array_equal(grader.to_host(args[i]), want) for i, want in expected.items())
        failed += not same
        rows.append({"case": cid, "bit_identical": same})
        print(f"{cid:40s} {'bit-identical' if same else 'DIFFERS'}")
    print(f"{len(rows) - failed}/{len(rows)} cases bit-identical on {grader.backend()}")
    if a.json:
        Path(a.json).write_text(json.dumps({"backend": grader.backend(), "cases": rows}, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

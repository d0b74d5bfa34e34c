"""Why module 09's matmul stays near half of cuBLAS: Nsight Compute on one launch of mma_matmul_pipe and one of
cuBLAS (cupy.matmul, fp16 in and out) at 4096^3.

    PYTHONPATH=. python3 benchmarks/profile_matmul.py --out DIR     # on the GPU machine, ncu on PATH

Two builds of the notebook's solution: the exercise's (its default macros) and the tuner's best
(benchmarks/results/autotune_matmul.json). For each, this file runs again under ``ncu`` as the driver
(``--launch``), launching that build once and then cupy.matmul once; ncu collects the metrics of
benchmarks/ncu_metrics.py for both kernels. Writes DIR/matmul_ncu.json and the table DIR/matmul_ncu.txt
(committed in benchmarks/results/).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from ncu_metrics import cli, collect, table as ncu_table  # noqa: E402

SIZE = 4096
MACROS = ("BM", "BN", "WARPS_M", "WARPS_N", "BK", "STAGES")


def builds() -> dict:
    """{label: macros}: the exercise's build (no -D: the kernel's defaults) and the tuner's fastest."""
    rows = json.loads((ROOT / "benchmarks" / "results" / "autotune_matmul.json").read_text())
    best = max((r for r in rows if r["status"] == "ok"), key=lambda r: r["tflops"])
    return {"exercise": {}, "tuned": {m: best[m] for m in MACROS}}


def launch(label: str):
    """The driver ncu profiles: the build once, then cuBLAS once, on the same A and B."""
    import cupy
    import numpy as np

    from grader.course import solution_source
    from grader.exercises.m09_pipelines import GEMM_BK, GEMM_BM, GEMM_BN, GEMM_STAGES, GEMM_WARPS, gemm_shared_bytes
    from grader.kernel import RawKernel

    macros = builds()[label]
    cfg = dict(BM=GEMM_BM, BN=GEMM_BN, WARPS_M=GEMM_WARPS[0], WARPS_N=GEMM_WARPS[1], BK=GEMM_BK, STAGES=GEMM_STAGES)
    cfg |= macros
    kernel = RawKernel(solution_source("mma_matmul_pipe"), "mma_matmul_pipe",
                       options=tuple(f"-D{k}={v}" for k, v in macros.items()), backend="gpu")
    smem = gemm_shared_bytes(cfg["STAGES"], cfg["BM"], cfg["BN"], cfg["BK"])
    kernel.max_dynamic_shared_size_bytes = smem
    rng = np.random.default_rng(0)
    a, b = (cupy.asarray(rng.standard_normal((SIZE, SIZE)).astype(np.float16)) for _ in range(2))
    c = cupy.empty((SIZE, SIZE), np.float32)
    kernel((SIZE // cfg["BN"], SIZE // cfg["BM"]), 32 * cfg["WARPS_M"] * cfg["WARPS_N"],
           (a, b, c, np.int32(SIZE), np.int32(SIZE), np.int32(SIZE)), shared_mem=smem)
    cupy.matmul(a, b)
    cupy.cuda.Device().synchronize()


def profile(ncu: str, label: str) -> dict:
    return collect(ncu, __file__, label, "mma_matmul_pipe|gemm|nvjet|cutlass|sm90",
                   lambda name: "mma_matmul_pipe" if "mma_matmul_pipe" in name else "cuBLAS")


def table(results: dict) -> str:
    return ncu_table(results, ("mma_matmul_pipe", "cuBLAS"), f"(M = N = K = {SIZE}, fp16)", 16)


if __name__ == "__main__":
    cli("matmul_ncu", launch,
        lambda exe: {f"{label} build {' '.join(f'{k}={v}' for k, v in macros.items()) or '(defaults)'}":
                     profile(exe, label) for label, macros in builds().items()}, table)

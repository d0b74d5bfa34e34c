"""Why the capstone falls short of SDPA's flash backend: Nsight Compute on one launch of each, same
shape (B=4, H=16, S=4096), in every configuration (fp16/bf16 x d 64/128 x causal or not).

    PYTHONPATH=. python3 benchmarks/profile_capstone.py --out DIR     # on the GPU machine, ncu on PATH

For each (dtype, d, causal) it runs this file again under ``ncu`` as the driver (``--launch``): the
capstone's tuned build (benchmarks/results/capstone.json) launched once, then SDPA's flash backend
once; ncu collects the metrics of benchmarks/ncu_metrics.py for both kernels. Writes DIR/capstone_ncu.json and a table,
DIR/capstone_ncu.txt (committed in benchmarks/results/).
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ncu_metrics import METRICS, cli, collect, table as ncu_table  # noqa: E402

CONFIGS = [(dtype, d, causal) for dtype in ("fp16", "bf16") for d in (64, 128) for causal in (False, True)]
SHAPE = dict(B=4, H=16, S=4096)
# Blocks over what the GPU holds at once (ncu's launch statistics): a fraction means the grid's last
# round of blocks leaves SMs idle (benchmarks/timeline_capstone.py times that tail).
CAPSTONE_METRICS = METRICS | {"waves per SM": "launch__waves_per_multiprocessor"}


def launch(dtype: str, d: int, causal: bool):
    """The driver ncu profiles: one launch of the capstone's tuned build, then SDPA flash once."""
    import cupy
    import numpy as np
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from grader.capstone import build
    from grader.checks import get_exercise
    from grader.course import solution_source
    from grader.exercises import m11_capstone as m11
    from grader.kernel import RawKernel

    cfg = m11.tuned_configs()[(dtype, d, causal)]
    ex = get_exercise(build(dtype, d, causal, cfg))
    b, h, n = SHAPE["B"], SHAPE["H"], SHAPE["S"]
    tdtype = torch.float16 if dtype == "fp16" else torch.bfloat16
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=tdtype) for _ in range(3))
    o = torch.empty_like(q)
    lse = torch.empty(b, h, n, device="cuda", dtype=torch.float32)
    lengths = torch.full((b,), n, device="cuda", dtype=torch.int32)
    kernel = RawKernel(solution_source("capstone_fwd_d64"), m11.KERNEL, options=ex.options, backend="gpu")
    smem = m11.shared_bytes(d, cfg)
    kernel.max_dynamic_shared_size_bytes = smem
    as_cupy = [cupy.asarray(t) for t in (q, k, v, lengths, o, lse)]
    p = type("P", (), dict(N=n, H=h, B=b))
    kernel(ex.grid(p), ex.block(p), (*as_cupy, np.int32(n), np.float32(d ** -0.5)), shared_mem=smem)
    cupy.cuda.Device().synchronize()
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch.cuda.synchronize()


def profile(ncu: str, dtype: str, d: int, causal: bool) -> dict:
    """Both kernels' metrics, the GPU they ran on (``device``) and the capstone's choices (``choices``)."""
    got = collect(ncu, __file__, f"{dtype},{d},{int(causal)}", "capstone_fwd|flash_fwd",
                  lambda name: "capstone" if "capstone_fwd" in name else "SDPA flash", CAPSTONE_METRICS)
    name = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", "0"],
                          capture_output=True, text=True).stdout.strip()
    from grader.exercises import m11_capstone as m11

    return got | {"device": name, "choices": m11.tuned_configs()[(dtype, d, causal)]}


def table(results: dict) -> str:
    return ncu_table(results, ("capstone", "SDPA flash"), "(B=4, H=16, S=4096)", 12, CAPSTONE_METRICS)


def _launch(spec: str):
    dt, dd, cc = spec.split(",")
    launch(dt, int(dd), bool(int(cc)))


if __name__ == "__main__":
    cli("capstone_ncu", _launch,
        lambda exe: {f"{dt} d={dd}{' causal' if cc else ''}": profile(exe, dt, dd, cc) for dt, dd, cc in CONFIGS}, table)

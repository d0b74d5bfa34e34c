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


class CapstoneLaunch:
    """A build of the capstone with choices ``cfg`` on random inputs at B, H of SHAPE and ``S``: the
    torch tensors (``q``, ``k``, ``v``), and ``run(*extra)`` launches the solution as ``edit`` returns
    it (``extra``: arguments after the kernel's own)."""

    def __init__(self, dtype: str, d: int, causal: bool, S: int, cfg: dict, edit=lambda source: source):
        import cupy
        import numpy as np
        import torch

        from grader.capstone import build
        from grader.checks import get_exercise
        from grader.course import solution_source
        from grader.exercises import m11_capstone as m11
        from grader.kernel import RawKernel

        self.ex = get_exercise(build(dtype, d, causal, cfg))
        b, h = SHAPE["B"], SHAPE["H"]
        tdtype = torch.float16 if dtype == "fp16" else torch.bfloat16
        self.q, self.k, self.v = (torch.randn(b, h, S, d, device="cuda", dtype=tdtype) for _ in range(3))
        o = torch.empty_like(self.q)
        lse = torch.empty(b, h, S, device="cuda", dtype=torch.float32)
        lengths = torch.full((b,), S, device="cuda", dtype=torch.int32)
        self.kernel = RawKernel(edit(solution_source(self.ex.id)), m11.KERNEL, options=self.ex.options, backend="gpu")
        self.smem = m11.shared_bytes(d, cfg)
        self.kernel.max_dynamic_shared_size_bytes = self.smem
        p = type("P", (), dict(N=S, H=h, B=b))
        self.grid, self.block = self.ex.grid(p), self.ex.block(p)
        self.args = (*[cupy.asarray(t) for t in (self.q, self.k, self.v, lengths, o, lse)],
                     np.int32(S), np.float32(d ** -0.5))

    def run(self, *extra):
        self.kernel(self.grid, self.block, (*self.args, *extra), shared_mem=self.smem)


def launch(dtype: str, d: int, causal: bool):
    """The driver ncu profiles: one launch of the capstone's tuned build, then SDPA flash once."""
    import cupy
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from grader.exercises import m11_capstone as m11

    one = CapstoneLaunch(dtype, d, causal, SHAPE["S"], m11.tuned_configs()[(dtype, d, causal)])
    one.run()
    cupy.cuda.Device().synchronize()
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        torch.nn.functional.scaled_dot_product_attention(one.q, one.k, one.v, is_causal=causal)
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

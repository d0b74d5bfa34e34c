"""Why the capstone falls short of SDPA's flash backend: Nsight Compute on one launch of each, same
shape (B=4, H=16, S=4096), for the configurations the reading discusses.

    PYTHONPATH=. python3 benchmarks/profile_capstone.py --out DIR     # on the GPU machine, ncu on PATH

For each (dtype, d, causal) it runs this file again under ``ncu`` as the driver (``--launch``): the
capstone's tuned build (benchmarks/results/capstone.json) launched once, then SDPA's flash backend
once; ncu collects the metrics below for both kernels. Writes DIR/capstone_ncu.json and a table,
DIR/capstone_ncu.txt (committed in benchmarks/results/).
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CONFIGS = [("fp16", 64, False), ("fp16", 64, True), ("fp16", 128, False), ("fp16", 128, True)]
SHAPE = dict(B=4, H=16, S=4096)
METRICS = {
    "duration (us)": "gpu__time_duration.sum",
    "tensor pipe active (% of peak)": "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "issue slots busy (%)": "smsp__issue_active.avg.pct_of_peak_sustained_active",
    "warps per SM (achieved)": "sm__warps_active.avg.per_cycle_active",
    "registers per thread": "launch__registers_per_thread",
    "instructions (M)": "smsp__inst_executed.sum",
    "MUFU instructions (M)": "smsp__inst_executed_pipe_xu.sum",
    "shared load wavefronts (M)": "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "local (spill) bytes (MB)": "l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum",
    "DRAM bytes read (MB)": "dram__bytes_read.sum",
    "stall: math pipe throttle (warps per issue)": "smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio",
    "stall: mio throttle (warps per issue)": "smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio",
    "stall: barrier (warps per issue)": "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",
    "stall: short scoreboard (warps per issue)": "smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio",
    "stall: long scoreboard (warps per issue)": "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
    "stall: wait (warps per issue)": "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio",
    "stall: not selected (warps per issue)": "smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio",
    "stall: dispatch stall (warps per issue)": "smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio",
}
SCALE = {"duration (us)": 1e-3, "instructions (M)": 1e-6, "MUFU instructions (M)": 1e-6,
         "shared load wavefronts (M)": 1e-6, "local (spill) bytes (MB)": 1e-6, "DRAM bytes read (MB)": 1e-6}


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
    cmd = [ncu, "--csv", "--print-units", "base", "--metrics", ",".join(METRICS.values()),
           "--kernel-name", "regex:capstone_fwd|flash_fwd", sys.executable, __file__, "--launch",
           f"{dtype},{d},{int(causal)}"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    rows = [r for r in csv.DictReader(io.StringIO(done.stdout[done.stdout.find('"ID"'):]))]
    found = {}
    for r in rows:
        who = "capstone" if "capstone_fwd" in r["Kernel Name"] else "SDPA flash"
        try:
            found.setdefault(who, {})[r["Metric Name"]] = float(r["Metric Value"].replace(",", ""))
        except ValueError:
            continue
    if not found:
        raise SystemExit(f"ncu returned no rows for {dtype} d={d} causal={causal}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return {who: {name: values.get(metric, float("nan")) * SCALE.get(name, 1.0) for name, metric in METRICS.items()}
            for who, values in found.items()}


def table(results: dict) -> str:
    lines = []
    for key, kernels in results.items():
        lines.append(f"{key} (B=4, H=16, S=4096)")
        lines.append(f"  {'metric':42s} {'capstone':>12s} {'SDPA flash':>12s}")
        for name in METRICS:
            a, b = (kernels.get(w, {}).get(name, float("nan")) for w in ("capstone", "SDPA flash"))
            lines.append(f"  {name:42s} {a:12.4g} {b:12.4g}")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("capstone_ncu_out"))
    ap.add_argument("--ncu", default="ncu")
    ap.add_argument("--launch", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.launch:
        dt, dd, cc = a.launch.split(",")
        launch(dt, int(dd), bool(int(cc)))
        sys.exit(0)
    exe = shutil.which(a.ncu) or sys.exit(f"{a.ncu} not found")
    results = {f"{dt} d={dd}{' causal' if cc else ''}": profile(exe, dt, dd, cc) for dt, dd, cc in CONFIGS}
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "capstone_ncu.json").write_text(json.dumps(results, indent=1) + "\n")
    (a.out / "capstone_ncu.txt").write_text(table(results))
    print(table(results))

"""Nsight Compute as the profiling scripts use it: a driver script runs itself under ``ncu`` with
``--launch ARG`` (launching the kernels once each), and the metrics below come back per kernel,
scaled to the units their names give."""
from __future__ import annotations

import argparse
import csv
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

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


def collect(ncu: str, driver: str, launch: str, kernel_regex: str, who: Callable[[str], str],
            metrics: dict = METRICS) -> dict:
    """Run ``driver --launch launch`` under ncu, keeping the kernels ``kernel_regex`` matches;
    ``who(kernel name)`` labels each. Returns {label: {metric name: scaled value}} for ``metrics``
    (by default METRICS; a script adds its own beside them)."""
    cmd = [ncu, "--csv", "--print-units", "base", "--metrics", ",".join(metrics.values()),
           "--kernel-name", f"regex:{kernel_regex}", sys.executable, driver, "--launch", launch]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    found = {}
    for r in csv.DictReader(io.StringIO(done.stdout[done.stdout.find('"ID"'):])):
        try:
            found.setdefault(who(r["Kernel Name"]), {})[r["Metric Name"]] = float(r["Metric Value"].replace(",", ""))
        except ValueError:
            continue
    if not found:
        raise SystemExit(f"ncu returned no rows for --launch {launch}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return {label: {name: values.get(metric, float("nan")) * SCALE.get(name, 1.0) for name, metric in metrics.items()}
            for label, values in found.items()}


def table(results: dict, labels, suffix: str, width: int, metrics: dict = METRICS) -> str:
    """{configuration: {label: metrics}} as text: per configuration, one row per metric and one
    column per label (a label ncu did not report shows nan)."""
    lines = []
    for key, kernels in results.items():
        lines.append(f"{key} {suffix}")
        lines.append(f"  {'metric':42s}" + "".join(f" {label:>{width}s}" for label in labels))
        for name in metrics:
            lines.append(f"  {name:42s}" + "".join(f" {kernels.get(label, {}).get(name, float('nan')):{width}.4g}"
                                                   for label in labels))
        lines.append("")
    return "\n".join(lines)


def cli(stem: str, launch: Callable[[str], None], profile_all: Callable[[str], dict], show: Callable[[dict], str]):
    """A profiling script's command line: ``--launch SPEC`` is the child that ncu profiles (``launch(SPEC)``);
    otherwise ``profile_all(ncu)`` runs them and OUT (``--out``, default ``STEM_out``) gets STEM.json and the
    table ``show(results)`` as STEM.txt."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path(f"{stem}_out"))
    ap.add_argument("--ncu", default="ncu")
    ap.add_argument("--launch", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.launch is not None:
        launch(a.launch)
        sys.exit(0)
    exe = shutil.which(a.ncu) or sys.exit(f"{a.ncu} not found")
    results = profile_all(exe)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / f"{stem}.json").write_text(json.dumps(results, indent=1) + "\n")
    (a.out / f"{stem}.txt").write_text(show(results))
    print(show(results))

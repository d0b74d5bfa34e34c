"""Module 11's backward on a GPU: capstone_bwd_dkdv + capstone_bwd_dq (read from the instructor
notebook, the kernels the course grades) checked on the GPU with every grading case, then their
launch choices swept part by part, and the dK/dV kernel's fused build (FUSED_DQ=1: dQ added with
atomics, no dQ kernel) over its own choices; the faster of the two ways per configuration is then
timed (D + dK/dV + dQ, or D + zero-fill + fused) in the 8 configurations (fp16/bf16 x d 64/128 x
causal/not) at B=4, H=16, S=4096 beside SDPA's flash backward (the target: FA2's) and cuDNN's, on
the same tensors (O and L from SDPA's flash forward).

    python benchmarks/bench_11_backward.py gpu [--merge]   # on a GPU (a few minutes)
    python benchmarks/bench_11_backward.py gpu --ablation-only   # ABLATIONS beside the committed choices

Writes benchmarks/results/capstone_backward.json (`bench` records `capstone_bwd_*`, the sweep, the
chosen launch per configuration) and its table as .txt; `--merge` puts the records into
benchmarks/results/gpu_evidence.json. FLOPs are SDPA's backward convention (5 products, halved
when causal), for ours as for the baselines.
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader import benchmark  # noqa: E402
from grader.capstone import BWD_SHAPE, backward_table, bench_backward  # noqa: E402
from grader.checks import run_check  # noqa: E402
from grader.errors import CourseError  # noqa: E402
from grader.course import solution_source  # noqa: E402
from grader.exercises import m11_capstone as m11  # noqa: E402
from grader.wrong_corpus import replace_each_once  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
ROWS = [f"capstone_bwd_{part}_{build}" for part in ("dkdv", "dq", "dkdv_fused")
        for build in ("d64", "causal_d64", "bf16_causal_d128")]
SWEEP = {
    "dkdv": [dict(WARPS=w, TILE=t, STAGES=s) for w, t, s in itertools.product((4, 8), (32, 64), (2, 3))],
    "dq": [dict(WARPS=w, WARP_ROWS=r, TILE=64, STAGES=s) for w, r, s in itertools.product((4, 8), (16, 32), (2, 3))]
    + [dict(WARPS=4, WARP_ROWS=16, TILE=128, STAGES=2), dict(WARPS=4, WARP_ROWS=32, TILE=32, STAGES=3)],
    # the dK/dV kernel adding dQ itself: more keys per block means fewer atomic adds per dQ element
    "fused": [dict(FUSED_DQ=1, WARPS=w, TILE=t, STAGES=s) for w, t, s in ((8, 64, 2), (8, 64, 3), (8, 32, 2), (4, 64, 2))],
}


# One idea of the fused build taken back, as edits of the dK/dV solution ((find, replace), ...): timed
# at the committed fused choices of each fp16 configuration (module 11's reading tables them).
ABLATIONS = {
    "two atomicAdd per pair of columns instead of atomic_add2": ((
        "        for (int n = 0; n < DQ_COLS / 8; ++n) atomic_add2(out + n * 8, acc[n][2 * r] * scale, "
        "acc[n][2 * r + 1] * scale);",
        "        for (int n = 0; n < DQ_COLS / 8; ++n) {\n"
        "            atomicAdd(out + n * 8, acc[n][2 * r] * scale);\n"
        "            atomicAdd(out + n * 8 + 1, acc[n][2 * r + 1] * scale);\n"
        "        }"),),
    "the grid's block order (causal: one head's key blocks at a time, heaviest first)": ((
        "    if (CAUSAL) heaviest_first(4 * (size_t)N * HEAD_DIM, false, bh, kb);  // the blocks read Q and dO\n",
        ""),),
}


def ablation(dkdv):
    """Each ABLATIONS edit timed (D + zero-fill + fused, beside the unedited kernel in the same run) at
    the committed choices of every fp16 configuration whose backward is the fused build."""
    committed = json.loads((RESULTS / "capstone_backward.json").read_text())
    rows = []
    for rec in committed["bench"]:
        if rec["dtype"] != "fp16" or "dq" in rec["choices"]:
            continue
        config, choices = [("fp16", rec["d"], rec["causal"])], {"dkdv": rec["choices"]["dkdv"]}
        (kept,) = bench_backward(dkdv, None, configs=config, choices=choices, baselines=False)
        for what, edits in ABLATIONS.items():
            (row,) = bench_backward(replace_each_once(dkdv, edits, f"ablation {what!r}"), None, configs=config,
                                    choices=choices, baselines=False)
            rows.append(dict(d=rec["d"], causal=rec["causal"], change=what, ms=benchmark._sig(float(np.median(row.ms))),
                             kept_ms=benchmark._sig(float(np.median(kept.ms))), choices=choices["dkdv"]))
            print(rows[-1], flush=True)
    committed["ablation"] = rows
    (RESULTS / "capstone_backward.json").write_text(json.dumps(committed, indent=1) + "\n")


def check_all():
    for ex in ROWS:
        result = run_check(ex, solution_source(ex), include_hidden=True, backend="gpu", seed=2024)
        print(f"check {ex}: {'passed' if result.passed else result.first_failure.message}", flush=True)
        if not result.passed:
            raise SystemExit(1)


def sweep(dkdv, dq):
    """Each part's time per launch choice, fp16, per (d, causal): the fastest of each part, or the
    fastest fused build where it beats their sum, per configuration (bf16 takes fp16's)."""
    found, runs = {}, []
    for d, causal in itertools.product((64, 128), (False, True)):
        best = {}
        for a, b in itertools.zip_longest(SWEEP["dkdv"], SWEEP["dq"]):
            choices = {"dkdv": a or SWEEP["dkdv"][0], "dq": b or SWEEP["dq"][0]}
            try:
                (row,) = bench_backward(dkdv, dq, configs=[("fp16", d, causal)], choices=choices, repeats=1,
                                        baselines=False)
            except CourseError as exc:  # a build over the shared-memory or register limit: refused before launch
                runs.append(dict(d=d, causal=causal, choices=choices, error=str(exc).splitlines()[0][:200]))
                print(f"  d={d} causal={causal} {choices}: {str(exc).splitlines()[0][:120]}", flush=True)
                continue
            d_ms = row.parts_ms["D"]
            for part, cfg in (("dkdv", a), ("dq", b)):
                if cfg is None:
                    continue
                ms = row.parts_ms[part]
                runs.append(dict(d=d, causal=causal, part=part, **cfg, ms=benchmark._sig(ms), regs=row.regs[part]))
                if part not in best or ms < best[part][1]:
                    best[part] = (cfg, ms)
            print(f"  d={d} causal={causal} {choices}: dkdv {row.parts_ms['dkdv']:.4f} ms ({row.regs['dkdv']} regs), "
                  f"dq {row.parts_ms['dq']:.4f} ms ({row.regs['dq']} regs), D {row.parts_ms['D']:.4f} ms", flush=True)
        two = {part: cfg for part, (cfg, _) in best.items()}
        two_ms = sum(ms for _, ms in best.values()) + d_ms
        fused = None
        for cfg in SWEEP["fused"]:
            try:
                (row,) = bench_backward(dkdv, None, configs=[("fp16", d, causal)], choices={"dkdv": cfg}, repeats=1,
                                        baselines=False)
            except CourseError as exc:
                runs.append(dict(d=d, causal=causal, part="fused", **cfg, error=str(exc).splitlines()[0][:200]))
                continue
            ms = float(np.median(row.ms))
            runs.append(dict(d=d, causal=causal, part="fused", **cfg, ms=benchmark._sig(ms),
                             kernel_ms=benchmark._sig(row.parts_ms["dkdv"]), regs=row.regs["dkdv"]))
            print(f"  d={d} causal={causal} fused {cfg}: {ms:.4f} ms in all (kernel {row.parts_ms['dkdv']:.4f}, "
                  f"{row.regs['dkdv']} regs); two kernels: {two_ms:.4f} ms", flush=True)
            if fused is None or ms < fused[1]:
                fused = (cfg, ms)
        found[(d, causal)] = {"dkdv": fused[0]} if fused and fused[1] < two_ms else two
    return found, runs


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["gpu"])
    parser.add_argument("--merge", action="store_true")
    parser.add_argument("--ablation-only", action="store_true", help="time only ABLATIONS, at the committed choices")
    args = parser.parse_args()
    import torch

    if args.ablation_only:
        return ablation(solution_source("capstone_bwd_dkdv_d64"))

    check_all()
    dkdv, dq = solution_source("capstone_bwd_dkdv_d64"), solution_source("capstone_bwd_dq_d64")
    chosen, runs = sweep(dkdv, dq)
    rows = []
    for dtype, d, causal in m11.CONFIGS:
        rows += bench_backward(dkdv, dq, configs=[(dtype, d, causal)], choices=chosen[(d, causal)])
    table = backward_table(rows)
    print(table, flush=True)
    device = torch.cuda.get_device_name()
    records = []
    for r in rows:
        ms = float(np.median(r.ms))
        rec = dict(kernel=f"capstone_bwd_d{r.d}{'_causal' if r.causal else ''}", dtype=r.dtype, d=r.d,
                   causal=r.causal, B=BWD_SHAPE["B"], H=BWD_SHAPE["H"], S=r.S, ms=benchmark._sig(ms),
                   tflops=benchmark._sig(r.tflops(ms)), baseline="sdpa_flash_bwd",
                   baseline_tflops=benchmark._sig(r.tflops(r.baseline_ms)) if r.baseline_ms else None,
                   ratio=benchmark._sig(r.baseline_ms / ms) if r.baseline_ms else None,
                   baseline_ms=benchmark._sig(r.baseline_ms) if r.baseline_ms else None,
                   cudnn_ms=benchmark._sig(r.cudnn_ms) if r.cudnn_ms else None,
                   cudnn_ratio=benchmark._sig(r.cudnn_ms / ms) if r.cudnn_ms else None,
                   parts_ms={k: benchmark._sig(v) for k, v in r.parts_ms.items()},
                   repeat_ms=[benchmark._sig(t) for t in r.ms],
                   run_to_run=benchmark._sig(benchmark.run_to_run_spread(r.ms)),
                   max_abs_err_vs_sdpa=r.max_abs_err, choices=r.cfg, regs=r.regs, device=device,
                   source="notebooks/11_capstone")
        records.append(rec)
    out = dict(device=device, command="python benchmarks/bench_11_backward.py gpu --merge", bench=records,
               sweep=runs, chosen=[dict(d=d, causal=c, **cfg) for (d, c), cfg in chosen.items()])
    (RESULTS / "capstone_backward.json").write_text(json.dumps(out, indent=1) + "\n")
    ablation(dkdv)  # reads what was just written, adds its rows
    (RESULTS / "capstone_backward.txt").write_text(table + "\n")
    if args.merge:
        benchmark.merge_records(RESULTS / "gpu_evidence.json", records)


if __name__ == "__main__":
    main()

"""Benchmark the course's solution kernels on a GPU and write the ``bench`` evidence records.

Every kernel with a benchmark declaration (``grader/benchspec.py``) is read from its
instructor notebook, checked on its visible cases, and timed three times (warm-up included
each time) next to its baselines, at B=4, H=16, S=4096 with d=64 and d=128 for attention
(causal for the causal kernels), 4096^3 for the matmuls. The three medians give the
run-to-run spread; a record whose spread is over 3% is flagged.

    python3 benchmarks/bench_gpu.py OUTDIR [--only flash_fwd_row,matmul_tiled] [--repeats 3]
    python3 benchmarks/bench_gpu.py --merge OUTDIR/bench.json benchmarks/results/gpu_evidence.json

The first writes OUTDIR/bench.json (``device`` and ``bench``) and OUTDIR/bench.txt (the
tables); the second, on any machine, merges those records into the committed evidence.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import grader  # noqa: E402
from grader.benchmark import Budget, bench, merge_records  # noqa: E402
from grader.benchspec import SPECS  # noqa: E402
from grader.course import solution_source  # noqa: E402

HEAD_DIMS = (64, 128)
TARGET_SPREAD = 0.03


def plan(only=None) -> list[tuple[str, dict]]:
    """(exercise, shape) pairs: each attention kernel at both head dimensions (one built for a
    head dimension at its own), the rest at their declared default (qk_scores_tiled, whose shape
    has a d, at both too)."""
    jobs = []
    for ex_id, spec in SPECS.items():
        if only and ex_id not in only:
            continue
        if "d" in spec.shape and "d" not in spec.fixed:
            jobs += [(ex_id, dict(spec.shape, d=d)) for d in HEAD_DIMS]
        else:
            jobs.append((ex_id, dict(spec.shape)))
    return jobs


def summary(records) -> str:
    lines = [f"{'kernel':24s}{'dtype':>6s}{'d':>5s}{'causal':>7s}{'shape':>22s}{'ms':>10s}{'r2r':>7s}{'TFLOP/s':>9s}"
             f"{'GB/s':>8s}  {'baseline':42s}{'TFLOP/s':>9s}{'ratio':>8s}{'vs fp16 SDPA':>13s}"]
    for r in records:
        shape = " ".join(f"{k}={r[k]}" for k in ("B", "H", "S", "M", "N", "K", "rows", "cols") if r.get(k) is not None)
        r2r = r.get("run_to_run", 0.0)
        flag = " !" if r2r > TARGET_SPREAD else ""

        def num(x, fmt):
            return "-" if x is None else format(x, fmt)

        lines.append(f"{r['kernel']:24s}{r['dtype']:>6s}{num(r['d'], 'd'):>5s}{str(r['causal']):>7s}{shape:>22s}"
                     f"{r['ms']:10.4g}{r2r:7.1%}{num(r['tflops'], '.3g'):>9s}{r['gbps']:8.4g}  "
                     f"{(r['baseline'] or '-'):42s}{num(r['baseline_tflops'], '.3g'):>9s}{num(r['ratio'], '.3g'):>8s}"
                     f"{num(r.get('sol_ratio'), '.3g'):>13s}{flag}")
    worst = max((r.get("run_to_run", 0.0) for r in records), default=0.0)
    lines.append(f"largest run-to-run spread: {worst:.1%} (target <= {TARGET_SPREAD:.0%}; '!' marks records over it)")
    return "\n".join(lines)


def run(out: Path, only, repeats: int, budget: Budget) -> int:
    import cupy

    out.mkdir(parents=True, exist_ok=True)
    grader.set_backend("gpu")
    records, tables, failed = [], [], []
    for ex_id, shape in plan(only):
        t0 = time.perf_counter()
        try:
            report = bench(ex_id, solution_source(ex_id), shape=shape, repeats=repeats, budget=budget)
        except Exception as err:  # one kernel's failure must not lose the others' records
            failed.append(f"{ex_id} {shape}: {type(err).__name__}: {err}")
            print(f"{ex_id} {shape}: not benchmarked: {err}", flush=True)
            continue
        finally:
            cupy.get_default_memory_pool().free_all_blocks()
            _release_torch_cache()
        tables.append(report.table())
        print(tables[-1], f"\n  ({time.perf_counter() - t0:.1f} s)\n", flush=True)
        if report.check_passed:
            records.append(report.record())
        else:
            failed.append(f"{ex_id}: fails its check")
    device = records[0]["device"] if records else None
    (out / "bench.json").write_text(json.dumps({"device": device, "bench": records}, indent=1) + "\n")
    text = summary(records)
    (out / "bench.txt").write_text("\n\n".join(tables) + "\n\n" + text + "\n" + "\n".join(failed) + "\n")
    print(text)
    for f in failed:
        print("FAILED:", f)
    return 1 if failed else 0


def _release_torch_cache():
    try:
        import torch
    except ImportError:
        return
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", nargs="?", type=Path, help="output directory (bench.json, bench.txt)")
    ap.add_argument("--only", help="comma-separated exercise ids")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--min-runs", type=int, default=10)
    ap.add_argument("--min-ms", type=float, default=200.0)
    ap.add_argument("--max-ms", type=float, default=5000.0, help="per measurement; slower kernels stop at 3 runs")
    ap.add_argument("--merge", nargs=2, metavar=("BENCH_JSON", "EVIDENCE_JSON"),
                    help="merge the records of a bench.json into an evidence file (no GPU needed)")
    args = ap.parse_args(argv)
    if args.merge:
        src, dest = map(Path, args.merge)
        records = json.loads(src.read_text())["bench"]
        merge_records(dest, records)
        print(f"{len(records)} records merged into {dest}")
        return 0
    if args.out is None:
        ap.error("give an output directory (or --merge)")
    only = set(args.only.split(",")) if args.only else None
    unknown = (only or set()) - set(SPECS)
    if unknown:
        ap.error(f"no benchmark declared for {', '.join(sorted(unknown))}; known: {', '.join(SPECS)}")
    budget = Budget(min_runs=args.min_runs, min_ms=args.min_ms, max_ms=args.max_ms)
    return run(args.out, only, args.repeats, budget)


if __name__ == "__main__":
    raise SystemExit(main())

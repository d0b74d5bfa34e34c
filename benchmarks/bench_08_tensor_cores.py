"""GPU evidence for module 08: every solution kernel of notebooks/08_tensor_cores, checked, then timed.

All through `grader.bench`, which checks a kernel on its exercise's cases before timing it and
reads the precision of its tensors from the source under the row's -D options: the matmuls
against cuBLAS at 4096^3, and the flash forward (one source, `tc_flash_fwd`, graded as eight rows:
fp16/bf16 x d 64/128 x causal or not) at B=4, H=16, S=4096 beside PyTorch's SDPA flash backend,
with cuDNN's time beside it. Every grading case of those rows runs on the GPU first.

    PYTHONPATH=. GRADER_BACKEND=gpu python3 benchmarks/bench_08_tensor_cores.py OUT.json
    PYTHONPATH=. python3 benchmarks/bench_08_tensor_cores.py --emulator    # the same calls, no GPU

On a GPU the `bench` records are merged into OUT.json (benchmarks/results/08_tensor_cores.json):
kernel `wmma_matmul`, `mma_matmul`, `tc_flash_fwd_d64`, `tc_flash_fwd_d64_causal`, ... (the dtype
and `causal` are fields; `exercise` names the row). `--emulator` makes every call a dry run at a
small shape: checked and launched once, not timed.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from grader.benchmark import bench, merge_records  # noqa: E402
from grader.checks import run_check  # noqa: E402
from grader.course import solution_source  # noqa: E402

SOURCE = "notebooks/08_tensor_cores"
MATMULS = ("wmma_matmul", "mma_matmul")
FLASH = [(dtype, d, causal) for dtype in ("fp16", "bf16") for d in (64, 128) for causal in (False, True)]
AGAINST = "FLASH_ATTENTION"  # the SDPA backend the flash forward's ratio is taken against
DRY_SHAPES = {"matmul": "M=80,N=96,K=48", "attention": "B=1,H=2,S=130"}  # past one block each way, wmma: x16


def flash_exercise(dtype: str, d: int, causal: bool) -> str:
    return "tc_flash_fwd_" + ("bf16_" if dtype == "bf16" else "") + ("causal_" if causal else "") + f"d{d}"


def record_name(d: int, causal: bool) -> str:
    return f"tc_flash_fwd_d{d}{'_causal' if causal else ''}"


def flash_record(report, name: str) -> dict:
    """The report's record named ``name``, its ratio taken against SDPA's flash backend, with the
    exercise row and cuDNN's time beside it."""
    rec = report.record(against=AGAINST) | {"kernel": name, "exercise": report.exercise, "source": SOURCE}
    cudnn = next((b for b in report.baselines if b.backend == "CUDNN_ATTENTION" and b.role == "baseline" and b.ran),
                 None)
    if cudnn:
        rec |= {"cudnn_ms": round(cudnn.ms, 4), "cudnn_tflops": round(cudnn.tflops, 1)}
    return rec


def main(out: str | None = None, dry_run: bool = False, flash=FLASH, repeats: int = 3) -> list:
    """Check every row on its grading cases, then bench (or, ``dry_run``, rehearse) each kernel;
    returns the records (none in a dry run) and merges them into ``out``."""
    rows = ["qk_scores_mma", *MATMULS, *(flash_exercise(*c) for c in flash)]
    for ex in rows:
        result = run_check(ex, solution_source(ex), include_hidden=True, seed=1)
        print(result.summary().splitlines()[-1], flush=True)
        if not result.passed:
            raise SystemExit(f"{ex}: {result.first_failure.message}")

    records = []
    plan = [(ex, None, ex, "matmul") for ex in MATMULS] + [
        (flash_exercise(dtype, d, causal), dtype, record_name(d, causal), "attention") for dtype, d, causal in flash]
    for ex, dtype, name, family in plan:
        report = bench(ex, solution_source(ex), dtype=dtype, repeats=repeats, dry_run=dry_run,
                       shape=DRY_SHAPES[family] if dry_run else None)
        print(report.table(), flush=True)
        if not report.check_passed:
            raise SystemExit(f"{ex}: {report.check_message}")
        if dtype is not None and report.dtype != dtype:
            raise SystemExit(f"{ex}: benchmarked as {report.dtype}, not {dtype}")
        if not dry_run:
            records.append(flash_record(report, name) if family == "attention"
                           else report.record() | {"source": SOURCE})
    if out:
        merge_records(out, records)
        print(f"{len(records)} records merged into {out} (key 'bench')")
    return records


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", help="the JSON file the records are merged into (GPU run)")
    ap.add_argument("--emulator", action="store_true", help="dry runs at small shapes on the active backend")
    a = ap.parse_args()
    if not a.emulator and not a.out:
        ap.error("name the output file, or pass --emulator")
    main(a.out, dry_run=a.emulator)

"""Module 09's GPU evidence: the ladder from module 08's tensor-core forward to the pipelined,
swizzled and tuned kernels, in every configuration fp16/bf16 x d 64/128 x causal/not at
B=4, H=16, S=4096, beside SDPA's flash backend (and cuDNN's). Every kernel is read from the
instructor notebooks (grader.course.solution_source): the sources the course grades.

    python benchmarks/bench_09_pipelines.py gpu --out DIR      # on a GPU (about 5 minutes)
    python benchmarks/bench_09_pipelines.py emulator           # the same code path, tiny shapes, no timing
    python benchmarks/bench_09_pipelines.py specialisation --out DIR [--merge]
                                                               # warp-specialised against uniform warps (3 minutes)
    python benchmarks/bench_09_pipelines.py matmul-tune --out DIR [--merge]
                                                               # mma_matmul_pipe as the exercise builds it, at 2
                                                               # and 4 stages, then the tuner over its block and
                                                               # warp tiles, K step and stages, the best timed

Writes DIR/bench_09.json (the `bench` records: `tc_flash_fwd_pipe_*`, `tc_flash_fwd_swizzle_*`,
`tc_flash_fwd_tuned_*`, kernel names without the dtype, which is a field) and
DIR/autotune_tc_flash.json (the swizzled kernel's time over BLOCK_ROWS x STAGES per configuration,
the data of module 09's heatmap, and the matmul's over STAGES). `--merge` puts the records into results/gpu_evidence.json.
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import grader  # noqa: E402
from grader import autotune, benchmark, benchspec  # noqa: E402
from grader.device import H100_SXM  # noqa: E402
from grader.checks import REGISTRY, run_check  # noqa: E402
from grader.course import solution_source  # noqa: E402
from grader.exercises import m09_pipelines as m09  # noqa: E402

RESULTS = Path(__file__).parent / "results"
CONFIGS = [(dtype, d, causal) for dtype in ("fp16", "bf16") for d in (64, 128) for causal in (False, True)]
SWEEP = list(itertools.product((64, 128), (2, 3, 4)))  # (BLOCK_ROWS, STAGES)
FLASH = "FLASH_ATTENTION"


def build(kernel, dtype, d, causal, stages=m09.STAGES, block_rows=m09.BLOCK_ROWS):
    """A module 09 exercise row for this build, registered for the length of this run so that
    grader.bench can check and time it like any exercise."""
    ex, spec = m09.variant(kernel, d, dtype, causal, stages, block_rows, register=False)
    REGISTRY.setdefault(ex.id, ex)
    benchspec.SPECS.setdefault(ex.id, spec)
    return ex.id


def record_name(kernel, d, causal):
    return f"{kernel}_d{d}{'_causal' if causal else ''}"


def flash_record(report, name):
    """The report's record against SDPA's flash backend (the target's baseline), cuDNN's beside it."""
    rec = report.record(against=FLASH) | {"kernel": name}
    cudnn = next((b for b in report.baselines if b.backend == "CUDNN_ATTENTION" and b.ran), None)
    if cudnn:
        rec |= {"cudnn_ms": benchmark._sig(cudnn.ms), "cudnn_tflops": benchmark._sig(cudnn.tflops)}
    return rec


def matmul_stages(stages):
    """mma_matmul_pipe built with another STAGES, registered for this run."""
    ex = REGISTRY["mma_matmul_pipe"]
    ex_id = f"mma_matmul_pipe_stages{stages}"
    REGISTRY.setdefault(ex_id, dataclasses.replace(ex, id=ex_id, options=(f"-DSTAGES={stages}",),
                                                   shared_mem=lambda p: m09.gemm_shared_bytes(stages)))
    benchspec.SPECS.setdefault(ex_id, dataclasses.replace(benchspec.SPECS["mma_matmul_pipe"], exercise=ex_id))
    return ex_id


def matmul_main(repeats: int = 3) -> tuple[dict, list]:
    """The exercise's own build of mma_matmul_pipe against cuBLAS (its `bench` record), then the same
    kernel at 2 and 4 stages (rows of autotune_tc_flash.json)."""
    gemm = solution_source("mma_matmul_pipe")
    report = grader.bench("mma_matmul_pipe", gemm, repeats=repeats)
    if not report.check_passed:
        raise SystemExit(f"mma_matmul_pipe: {report.check_message}")
    print(report.table(), flush=True)
    sweep_rows = []
    for stages in (2, 4):
        r = grader.bench(matmul_stages(stages), gemm, baselines=False)
        if r.check_passed:
            sweep_rows.append(dict(kernel="mma_matmul_pipe", STAGES=stages, status="ok", ms=benchmark._sig(r.kernel.ms),
                                   tflops=benchmark._sig(r.kernel.tflops)))
            print(f"  mma_matmul_pipe STAGES={stages}: {r.kernel.ms:.4g} ms {r.kernel.tflops:.4g} TF/s", flush=True)
    return report.record(), sweep_rows


def gpu_main(out: Path, repeats: int = 3):
    sources = {k: solution_source(f"{k}_d64") for k in m09.KERNELS}
    record, sweep_rows = matmul_main(repeats)
    bench_records = [record]
    for dtype, d, causal in CONFIGS:
        baselines = None
        for kernel in m09.KERNELS:
            ex_id = build(kernel, dtype, d, causal)
            report = grader.bench(ex_id, sources[kernel], dtype=dtype, repeats=repeats, baselines=baselines is None)
            if not report.check_passed:
                raise SystemExit(f"{ex_id}: {report.check_message}")
            if baselines is None:
                baselines = report.baselines
            report.baselines = baselines
            rec = flash_record(report, record_name(kernel, d, causal))
            bench_records.append(rec)
            print(f"{rec['kernel']:34s} {dtype} {rec['ms']:8.4g} ms {rec['tflops']:6.4g} TF/s  "
                  f"x{rec['ratio']} of SDPA flash ({rec['baseline_tflops']} TF/s), cuDNN {rec.get('cudnn_tflops')} TF/s",
                  flush=True)

        best = None
        for block_rows, stages in SWEEP:
            row = dict(kernel="tc_flash_fwd_swizzle", d=d, dtype=dtype, causal=causal, BLOCK_ROWS=block_rows,
                       STAGES=stages)
            ex_id = build("tc_flash_fwd_swizzle", dtype, d, causal, stages, block_rows)
            smem = REGISTRY[ex_id].shared_mem(benchspec.SPECS[ex_id].params(benchspec.SPECS[ex_id].shape))
            if smem > H100_SXM.max_shared_per_block_optin:
                sweep_rows.append(row | dict(status=f"{smem} bytes of shared memory: over the per-block limit"))
                continue
            report = grader.bench(ex_id, sources["tc_flash_fwd_swizzle"], dtype=dtype, baselines=False)
            if not report.check_passed:
                sweep_rows.append(row | dict(status="check failed: " + report.check_message.splitlines()[0]))
                continue
            k = report.kernel
            sweep_rows.append(row | dict(status="ok", ms=benchmark._sig(k.ms), tflops=benchmark._sig(k.tflops)))
            if best is None or k.ms < best[0]:
                best = (k.ms, block_rows, stages)
            print(f"  sweep {dtype} d={d} causal={causal} BLOCK_ROWS={block_rows} STAGES={stages}: "
                  f"{k.ms:.4g} ms {k.tflops:.4g} TF/s", flush=True)

        _, block_rows, stages = best
        ex_id = build("tc_flash_fwd_swizzle", dtype, d, causal, stages, block_rows)
        report = grader.bench(ex_id, sources["tc_flash_fwd_swizzle"], dtype=dtype, repeats=repeats, baselines=False)
        report.baselines = baselines
        rec = flash_record(report, record_name("tc_flash_fwd_tuned", d, causal)) | dict(BLOCK_ROWS=block_rows,
                                                                                          STAGES=stages)
        bench_records.append(rec)
        print(f"{rec['kernel']:34s} {dtype} {rec['ms']:8.4g} ms {rec['tflops']:6.4g} TF/s  x{rec['ratio']} of SDPA "
              f"flash (BLOCK_ROWS={block_rows}, STAGES={stages})", flush=True)
        out.mkdir(parents=True, exist_ok=True)
        (out / "bench_09.json").write_text(json.dumps(bench_records, indent=1) + "\n")
        (out / "autotune_tc_flash.json").write_text(json.dumps(sweep_rows, indent=1) + "\n")

    # The tuner itself, on the course's own row: it must pick a configuration and cache it.
    result = autotune.tune("tc_flash_fwd_swizzle_d64", sources["tc_flash_fwd_swizzle"], refresh=True)
    print(result.table())


def matmul_tune_main(out: Path, repeats: int = 3) -> None:
    """matmul_main (the exercise's build and its stage sweep), then the course's tuner on
    mma_matmul_pipe's registered space (grader/exercises/m09_pipelines.py): every configuration
    checked on the exercise's visible cases, then timed at 4096^3; the best one benchmarked against
    cuBLAS like the exercise's own build. Writes DIR/autotune_matmul.json (one row per configuration),
    DIR/matmul_stages.json (the stage sweep) and DIR/bench_09_matmul.json (the `bench` records of the
    exercise's build and of the best one, `mma_matmul_pipe_tuned`)."""
    record, sweep_rows = matmul_main(repeats)
    out.mkdir(parents=True, exist_ok=True)
    (out / "matmul_stages.json").write_text(json.dumps(sweep_rows, indent=1) + "\n")
    gemm = solution_source("mma_matmul_pipe")
    result = autotune.tune("mma_matmul_pipe", gemm, refresh=True,
                           progress=lambda done, total, row: print(f"  {done}/{total} {row.cfg} {row.status} "
                                                                   f"{row.tflops or ''}", flush=True))
    print(result.table(), flush=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "autotune_matmul.json").write_text(json.dumps(result.records(), indent=1) + "\n")
    best = result.best
    ex = REGISTRY["mma_matmul_pipe"]
    space = autotune.SPACES["mma_matmul_pipe"]
    tuned = dataclasses.replace(autotune.variant(ex, space, best), id="mma_matmul_pipe_tuned")
    REGISTRY.setdefault(tuned.id, tuned)
    benchspec.SPECS.setdefault(tuned.id, dataclasses.replace(benchspec.SPECS["mma_matmul_pipe"], exercise=tuned.id))
    report = grader.bench(tuned.id, gemm, repeats=repeats)
    if not report.check_passed:
        raise SystemExit(f"{tuned.id}: {report.check_message}")
    print(report.table(), flush=True)
    (out / "bench_09_matmul.json").write_text(json.dumps([record, report.record() | best], indent=1) + "\n")


def registers(source, ex_id):
    """(registers per thread, local-memory bytes) of a build, from the compiled kernel."""
    from grader.kernel import RawKernel
    ex = REGISTRY[ex_id]
    attrs = RawKernel(source, ex.kernel, options=ex.options).compile()._compiled._kernel.attributes
    return int(attrs["num_regs"]), int(attrs["local_size_bytes"])


def specialisation_main(out: Path, repeats: int = 3):
    """Warp specialisation against the uniform-warp pipeline: tc_flash_fwd_ws and tc_flash_fwd_pipe
    timed in the same run, in every configuration at the exercise rows' BLOCK_ROWS and STAGES (the
    ws records, beside SDPA, go to the evidence), then both at STAGES 2, 3, 4 (fp16)."""
    sources = {k: solution_source(f"{k}_d64") for k in ("tc_flash_fwd_pipe", "tc_flash_fwd_ws")}
    records, rows = [], []
    out.mkdir(parents=True, exist_ok=True)

    def time(kernel, dtype, d, causal, stages, baselines):
        ex_id = build(kernel, dtype, d, causal, stages)
        report = grader.bench(ex_id, sources[kernel], dtype=dtype, repeats=repeats, baselines=baselines)
        if not report.check_passed:
            raise SystemExit(f"{ex_id}: {report.check_message}")
        regs, local = registers(sources[kernel], ex_id)
        row = dict(kernel=kernel, dtype=dtype, d=d, causal=causal, BLOCK_ROWS=m09.BLOCK_ROWS, STAGES=stages,
                   threads=m09.block_threads(kernel, m09.BLOCK_ROWS), regs=regs, local_bytes=local,
                   ms=benchmark._sig(report.kernel.ms), tflops=benchmark._sig(report.kernel.tflops))
        rows.append(row)
        print(f"  {kernel:18s} {dtype} d={d} causal={causal} STAGES={stages}: {row['tflops']:.4g} TF/s, "
              f"{regs} regs x {row['threads']} threads, {local} B local", flush=True)
        return report

    for dtype, d, causal in CONFIGS:
        for stages in ((2, 3, 4) if dtype == "fp16" else (m09.STAGES,)):
            time("tc_flash_fwd_pipe", dtype, d, causal, stages, baselines=False)
            report = time("tc_flash_fwd_ws", dtype, d, causal, stages, baselines=stages == m09.STAGES)
            if stages == m09.STAGES:
                records.append(flash_record(report, record_name("tc_flash_fwd_ws", d, causal)))
        (out / "warp_specialisation.json").write_text(json.dumps(rows, indent=1) + "\n")
        (out / "bench_09_ws.json").write_text(json.dumps(records, indent=1) + "\n")


def emulator_main():
    """Every build the GPU run times, checked on the emulator's visible cases (no timing)."""
    sources = {k: solution_source(f"{k}_d64") for k in m09.KERNELS}
    for dtype, d, causal in [("bf16", 128, True), ("fp16", 64, False)]:
        for kernel in m09.KERNELS:
            ex_id = build(kernel, dtype, d, causal)
            result = run_check(ex_id, sources[kernel])
            print(ex_id, "passed" if result.passed else result.first_failure.message, flush=True)
            if not result.passed:
                raise SystemExit(1)
    for ex_id, src in ((matmul_stages(4), solution_source("mma_matmul_pipe")),
                       (build("tc_flash_fwd_swizzle", "fp16", 64, False, 4, 64), sources["tc_flash_fwd_swizzle"])):
        result = run_check(ex_id, src)
        print(ex_id, "passed" if result.passed else result.first_failure.message, flush=True)
        if not result.passed:
            raise SystemExit(1)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["emulator", "gpu", "specialisation", "matmul-tune"])
    ap.add_argument("--out", type=Path, default=Path("bench09_out"))
    ap.add_argument("--merge", action="store_true", help="merge the records into results/gpu_evidence.json")
    a = ap.parse_args()
    if a.mode == "emulator":
        emulator_main()
    elif a.mode == "matmul-tune":
        matmul_tune_main(a.out)
        if a.merge:
            benchmark.merge_records(RESULTS / "gpu_evidence.json", json.loads((a.out / "bench_09_matmul.json").read_text()))
            (RESULTS / "autotune_matmul.json").write_text((a.out / "autotune_matmul.json").read_text())
            flash_sweep = [r for r in json.loads((RESULTS / "autotune_tc_flash.json").read_text())
                           if r["kernel"] != "mma_matmul_pipe"]
            stages = json.loads((a.out / "matmul_stages.json").read_text())
            (RESULTS / "autotune_tc_flash.json").write_text(json.dumps(stages + flash_sweep, indent=1) + "\n")
    elif a.mode == "specialisation":
        specialisation_main(a.out)
        if a.merge:
            benchmark.merge_records(RESULTS / "gpu_evidence.json", json.loads((a.out / "bench_09_ws.json").read_text()))
            (RESULTS / "warp_specialisation.json").write_text((a.out / "warp_specialisation.json").read_text())
    else:
        gpu_main(a.out)
        if a.merge:
            benchmark.merge_records(RESULTS / "gpu_evidence.json", json.loads((a.out / "bench_09.json").read_text()))

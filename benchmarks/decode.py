"""Module 10's GPU evidence: split-KV decoding (decode_split + decode_merge, read from the instructor
notebook by grader.course.solution_source: the kernels the course grades) checked against the float64
reference, then timed at the decode shapes beside PyTorch's SDPA (flash and cuDNN backends).

    python benchmarks/decode.py gpu --out decode.json [--merge]   # on a GPU (a few minutes)
    python benchmarks/decode.py emulator                          # the correctness path on the CPU emulator

gpu: every decode exercise's check on the GPU (visible and grading cases), one end-to-end launch
against ref.attention_forward, then for d = 128 and 64 at (B=8, H=32, n_q=1, N=32768),
(B=1, H=32, n_q=1, N=131072) and (B=16, H=8, n_q=4, N=32768), all keys valid, fp16: split + merge
with choose_splits' split count (`decode_split_d*` records) and with one split per head
(`decode_nosplit_d*`), and SDPA on the same tensors. Each time is the median over runs with the L2
flushed between them (grader.benchmark), repeated three times. Bandwidth counts the bytes that must
move: Q, K and V read once, O written once. OUT (JSON) holds the `bench` records (S = N, the key
length), the `sweep` over splits at (B=1, H=32, n_q=1, N=131072) and (B=16, H=8, n_q=4, N=32768),
d=128 (the reading's figure), the device and the command; the same table as text goes to OUT with
the suffix .txt. `--merge` also puts the records into benchmarks/results/gpu_evidence.json.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import grader  # noqa: E402
from grader import benchmark  # noqa: E402
from grader import reference as ref  # noqa: E402
from grader.checks import run_check  # noqa: E402
from grader.course import solution_source  # noqa: E402
from grader.device import H100_SXM  # noqa: E402
from grader.exercises.m10_decoding import MERGE_THREADS, SPLIT_THREADS, choose_splits, decode_bytes  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
SHAPES = [(8, 32, 1, 32768), (1, 32, 1, 131072), (16, 8, 4, 32768)]  # (B, H, n_q, N)
SWEEP_SHAPES = [(1, 32, 1, 131072, 128), (16, 8, 4, 32768, 128)]  # (B, H, n_q, N, d)
SWEEP_SPLITS = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 512)
EXERCISES = [f"decode_{k}_d{d}" for k in ("split", "merge") for d in (64, 128)]
REPEATS = 3


def kernels(d: int):
    """(split, merge): the notebook's two kernels built for head dimension d on the active backend."""
    opts = (f"-DHEAD_DIM={d}",)
    return (grader.RawKernel(solution_source(f"decode_split_d{d}"), "decode_split", options=opts).compile(),
            grader.RawKernel(solution_source(f"decode_merge_d{d}"), "decode_merge", options=opts).compile())


def launcher(split, merge, q, k, v, lengths, splits):
    """(run, O, L): run() launches split + merge on the current stream with `splits` chunks per head."""
    xp = grader.xp
    B, H, n_q, d = q.shape
    O_part, L_part = xp.empty((B, H, splits, n_q, d), np.float32), xp.empty((B, H, splits, n_q), np.float32)
    O, L = xp.empty((B, H, n_q, d), np.float16), xp.empty((B, H, n_q), np.float32)
    split_args = (q, k, v, lengths, O_part, L_part, np.int32(n_q), np.int32(k.shape[2]), np.int32(splits),
                  np.float32(1 / math.sqrt(d)))
    merge_args = (O_part, L_part, O, L, np.int32(n_q), np.int32(splits))

    def run():
        split((splits, H, B), SPLIT_THREADS, split_args)
        merge((H, B), MERGE_THREADS, merge_args)

    return run, O, L


def end_to_end(B=2, H=3, n_q=3, N=300, d=64, lengths=(300, 77), splits=5, seed=0):
    """Split + merge on a small padded batch against the float64 reference: (max |O - ref|, max |L - ref|)."""
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal(s).astype(np.float16) for s in ((B, H, n_q, d), (B, H, N, d), (B, H, N, d)))
    lens = np.asarray(lengths, np.int32)
    run, O, L = launcher(*kernels(d), *(grader.to_device(a) for a in (q, k, v, lens)), splits)
    run()
    want_o, want_l = ref.attention_forward(q, k, v, scale=1 / math.sqrt(d), key_lengths=lens)
    return (float(np.abs(grader.to_host(O).astype(np.float64) - want_o).max()),
            float(np.abs(grader.to_host(L) - want_l).max()))


def check_all(backend: str, exercises=EXERCISES, launches=(("split + merge", end_to_end),)):
    """Every exercise's check (grading cases too), then each end-to-end launch (label, fn), fn giving the largest
    errors (O, L) against ref.attention_forward; exits on a failure."""
    for ex in exercises:
        result = run_check(ex, solution_source(ex), include_hidden=True, backend=backend, seed=2024)
        print(f"check {ex}: {'passed' if result.passed else result.first_failure.message}", flush=True)
        if not result.passed:
            raise SystemExit(1)
    for label, launch in launches:
        err_o, err_l = launch()
        ok = err_o < 4e-3 and err_l < 1e-4
        print(f"{label} against ref.attention_forward: max |O - ref| {err_o:.2e}, max |L - ref| {err_l:.2e} "
              f"{'ok' if ok else 'FAILED'}", flush=True)
        if not ok:
            raise SystemExit(1)


def emulator_main(check=check_all):
    start = time.perf_counter()
    check("cpu")
    print(f"({time.perf_counter() - start:.1f} s on the emulator)")


BUDGET = benchmark.Budget(min_runs=20, min_ms=200.0, max_ms=3000.0)  # per measurement, this script's


def gpu_timing(budget: benchmark.Budget = BUDGET, repeats: int = REPEATS):
    """(measure, stream, torch_stream): measure(fn, torch_side=False) gives the medians (ms) of ``repeats``
    measurements of fn, each as long as ``budget`` says, on one non-blocking stream, the L2 flushed between runs
    (grader.benchmark); torch_side runs fn with torch's current stream set to that stream."""
    import cupy
    import torch

    timer = benchmark.EventTimer()
    stream = cupy.cuda.Stream(non_blocking=True)
    torch_stream = torch.cuda.ExternalStream(stream.ptr)

    def measure(fn, torch_side=False):
        def call():
            if torch_side:
                with torch.cuda.stream(torch_stream):
                    fn()
            else:
                fn()
        return [budget.measure(timer, call, stream).median for _ in range(repeats)]

    return measure, stream, torch_stream


def sdpa_fields(base: dict, ms: float, flops: float, **rates) -> dict:
    """A record's fields for SDPA's backends (sdpa_times' ``base``) beside our time ``ms``: each backend's ms, its
    TFLOP/s and our ratio to it, and each of ``rates`` (name -> function of ms) for it too."""
    sig, out = benchmark._sig, {}
    if "sdpa_flash" in base:
        b = base["sdpa_flash"]
        out.update(baseline_tflops=sig(flops / b / 1e9), ratio=sig(b / ms), baseline_ms=sig(b),
                   baseline_backend="FLASH_ATTENTION", **{f"baseline_{k}": sig(f(b)) for k, f in rates.items()})
    if "sdpa_cudnn" in base:
        c = base["sdpa_cudnn"]
        out.update(cudnn_ms=sig(c), cudnn_tflops=sig(flops / c / 1e9), cudnn_ratio=sig(c / ms),
                   **{f"cudnn_{k}": sig(f(c)) for k, f in rates.items()})
    return out


def sdpa_times(q, k, v, measure, torch_stream, shape: str) -> dict:
    """{"sdpa_flash": ms, "sdpa_cudnn": ms}: PyTorch's SDPA on the same tensors with each backend; a backend that
    refuses them is left out, with a line that says so."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    base = {}
    for name, backend in (("sdpa_flash", SDPBackend.FLASH_ATTENTION), ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION)):
        def sdpa(backend=backend):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v)
        try:
            with torch.cuda.stream(torch_stream):
                sdpa()
            torch.cuda.synchronize()
            base[name] = float(np.median(measure(sdpa, torch_side=True)))
        except RuntimeError as e:
            print(f"  {name} unavailable at {shape}: {str(e).splitlines()[0]}")
    return base


def write_results(out: Path, script: str, merged: bool, head: dict, body: dict, lines: list) -> None:
    """OUT as JSON (head, the command that wrote it, body) and the same table as text with the suffix .txt."""
    out.parent.mkdir(parents=True, exist_ok=True)
    shown = out.resolve().relative_to(ROOT) if out.resolve().is_relative_to(ROOT) else out
    command = f"python benchmarks/{script} gpu --out {shown}" + (" --merge" if merged else "")
    out.write_text(json.dumps(head | {"command": command} | body, indent=1) + "\n")
    out.with_suffix(".txt").write_text("\n".join([f"{head['device']}: {command}", *lines]) + "\n")


def cli(emulator_main, gpu_main, default_out: Path) -> None:
    """`emulator`, or `gpu [--out OUT] [--merge]`: gpu_main(out, merged) returns the `bench` records, which --merge
    also puts into results/gpu_evidence.json."""
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["emulator", "gpu"])
    ap.add_argument("--out", type=Path, default=default_out)
    ap.add_argument("--merge", action="store_true", help="merge the records into results/gpu_evidence.json")
    a = ap.parse_args()
    if a.mode == "emulator":
        emulator_main()
    else:
        recs = gpu_main(a.out, a.merge)
        if a.merge:
            benchmark.merge_records(RESULTS / "gpu_evidence.json", recs)


def gpu_main(out: Path, merged: bool = False):
    import cupy
    import torch
    import torch.nn.functional as F

    check_all("gpu")
    device = torch.cuda.get_device_name()
    measure, stream, torch_stream = gpu_timing()

    def inputs(B, H, n_q, N, d):
        gen = torch.Generator(device="cuda").manual_seed(0)
        q = torch.randn(B, H, n_q, d, device="cuda", dtype=torch.float16, generator=gen)
        k, v = (torch.randn(B, H, N, d, device="cuda", dtype=torch.float16, generator=gen) for _ in range(2))
        lengths = torch.full((B,), N, device="cuda", dtype=torch.int32)
        return q, k, v, lengths

    def ours(split, merge, tensors, splits):
        with stream:
            run, O, _ = launcher(split, merge, *(cupy.from_dlpack(t) for t in tensors), splits)
            run()
        stream.synchronize()
        return run, O

    records, lines = [], []
    for d in (128, 64):
        split, merge = kernels(d)
        for B, H, n_q, N in SHAPES:
            tensors = inputs(B, H, n_q, N, d)
            q, k, v, _ = tensors
            nbytes, flops = decode_bytes(B, H, n_q, N, d), 4.0 * B * H * n_q * N * d
            with torch.cuda.stream(torch_stream):
                want = F.scaled_dot_product_attention(q, k, v)
            torch.cuda.synchronize()
            base = sdpa_times(q, k, v, measure, torch_stream, f"B={B} H={H} n_q={n_q} N={N} d={d}")
            chosen = choose_splits(B, H, N, n_q)
            for label, splits in ((f"decode_split_d{d}", chosen), (f"decode_nosplit_d{d}", 1)):
                run, O = ours(split, merge, tensors, splits)
                err = float((torch.from_dlpack(O).float() - want.float()).abs().max())
                times = measure(run)
                ms = float(np.median(times))
                rec = dict(kernel=label, dtype="fp16", d=d, causal=False, B=B, H=H, S=N, ms=benchmark._sig(ms),
                           tflops=benchmark._sig(flops / ms / 1e9), baseline="sdpa_flash",
                           baseline_tflops=None, ratio=None, n_q=n_q, splits=splits,
                           gbps=benchmark._sig(nbytes / ms / 1e6),
                           hbm_fraction=benchmark._sig(nbytes / ms / 1e9 / H100_SXM.hbm_tbps),
                           repeat_ms=[benchmark._sig(t) for t in times],
                           run_to_run=benchmark._sig(benchmark.run_to_run_spread(times)),
                           max_abs_err_vs_sdpa=err, device=device, source="notebooks/10_decoding")
                rec.update(sdpa_fields(base, ms, flops, gbps=lambda t: nbytes / t / 1e6))
                records.append(rec)
                line = (f"{label:20s} B={B:2d} H={H:2d} n_q={n_q} N={N:6d} splits={splits:3d}: {ms:8.4f} ms "
                        f"{rec['gbps']:7.0f} GB/s ({rec['hbm_fraction']:.0%} of {H100_SXM.hbm_tbps} TB/s) | SDPA flash "
                        f"{rec.get('baseline_ms')} ms ({rec.get('baseline_gbps')} GB/s, ratio {rec['ratio']}) | cuDNN "
                        f"{rec.get('cudnn_ms')} ms | max |O - sdpa| {err:.1e}")
                print(line, flush=True)
                lines.append(line)
            del tensors, q, k, v, want
            torch.cuda.empty_cache()

    sweep = []
    for B, H, n_q, N, d in SWEEP_SHAPES:
        split, merge = kernels(d)
        tensors = inputs(B, H, n_q, N, d)
        nbytes = decode_bytes(B, H, n_q, N, d)
        chosen = choose_splits(B, H, N, n_q)
        rows = []
        # choose_splits' own count too, when the list lacks it
        for splits in sorted(set(SWEEP_SPLITS) | {chosen}):
            ms = float(np.median(measure(ours(split, merge, tensors, splits)[0])))
            row = dict(B=B, H=H, n_q=n_q, S=N, d=d, splits=splits, blocks=B * H * splits, ms=benchmark._sig(ms),
                       gbps=benchmark._sig(nbytes / ms / 1e6),
                       hbm_fraction=benchmark._sig(nbytes / ms / 1e9 / H100_SXM.hbm_tbps), chosen=splits == chosen)
            rows.append(row)
            line = (f"sweep B={B} H={H} n_q={n_q} N={N} d={d} splits={splits:4d} blocks={row['blocks']:6d}: "
                    f"{ms:8.4f} ms {row['gbps']:7.0f} GB/s")
            print(line, flush=True)
            lines.append(line)
        sweep += rows
        del tensors
        torch.cuda.empty_cache()

    write_results(out, "decode.py", merged, dict(device=device, hbm_tbps=H100_SXM.hbm_tbps), dict(bench=records, sweep=sweep),
                  lines)
    return records


if __name__ == "__main__":
    cli(emulator_main, gpu_main, RESULTS / "decode.json")

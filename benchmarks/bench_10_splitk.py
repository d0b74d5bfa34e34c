"""Module 10's split-K forward: splitk_fwd + decode_merge (read from the instructor notebook by
grader.course.solution_source: the kernels the course grades) checked against the float64 reference, then timed
where a forward's grid is small next to the H100's 132 SMs and the keys are long, beside PyTorch's SDPA.

    python benchmarks/bench_10_splitk.py gpu [--out benchmarks/results/splitk_forward.json] [--merge]  # a GPU
    python benchmarks/bench_10_splitk.py emulator                                # the correctness part on the CPU

gpu: the splitk_fwd exercises' checks on the GPU (visible and grading cases), one end-to-end split + merge on a
small padded batch against ref.attention_forward, then for d = 128 and 64 at the (B, H, S_q, N) of SHAPES, fp16,
no mask, all keys valid: split + merge with choose_fwd_splits' count (`splitk_fwd_d*` records) and with one split
(`splitk_nosplit_d*`), the merge alone at the chosen count, SDPA's flash and cuDNN backends on the same tensors,
and the split counts of SWEEP_SPLITS and the chosen one (the `sweep` rows). Each time is the median over runs with
the L2 flushed between them (grader.benchmark), BUDGET's worth of them, repeated REPEATS times; TFLOP/s count
4 * B * H * S_q * N * d. A record's S is N (the key length, as benchmarks/decode.py), with S_q and N beside it. OUT
(JSON) holds the records, the sweep, the device, the command, the timing budget, how many of the (d, shape) pairs it
holds and the seconds since the start (OUT is rewritten after each); the same table as text goes to OUT with the
suffix .txt. `--merge` also puts the records into benchmarks/results/gpu_evidence.json.

The sweep stops at 8 splits and the budget is a quarter of benchmarks/decode.py's: the two runs cut short by their
time limit (results/splitk_forward_partial.txt) never had 16 or 32 splits fastest, and they timed about ten
launches per shape at 200 ms of runs each, three times.
"""
from __future__ import annotations

import functools
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
import grader  # noqa: E402
import decode  # noqa: E402
from grader import benchmark  # noqa: E402
from grader import reference as ref  # noqa: E402
from grader.course import solution_source  # noqa: E402
from grader.device import H100_SXM  # noqa: E402
from grader.exercises.m10_decoding import (MERGE_THREADS, SPLITK_BENCH_SHAPES, SPLITK_ROWS,  # noqa: E402
                                           SPLITK_THREADS, choose_fwd_splits, splitk_shared_bytes, splitk_tiles)

RESULTS = ROOT / "benchmarks" / "results"
SHAPES = SPLITK_BENCH_SHAPES
SWEEP_SPLITS = (1, 2, 4, 8)  # 16 and 32 were never the fastest in the partial runs
MIN_SWEEP_CHUNK = 512  # keys per split at the least in the sweep: shorter chunks only add partial results
EXERCISES = [f"splitk_fwd_d{d}" for d in (64, 128)]
REPEATS = 3
# Per measurement: at least 10 runs and 50 ms of them after 10 ms of warm-up, a quarter of decode.BUDGET's time;
# the times here (SDPA's included) are 0.15 to 3 ms, so about 17 to 340 runs, whose median is kept.
BUDGET = benchmark.Budget(min_runs=10, min_ms=50.0, max_ms=1000.0, warmup_ms=10.0)


def kernels(d: int):
    """(split, merge): the notebook's splitk_fwd and decode_merge built for head dimension d on the active backend."""
    opts = (f"-DHEAD_DIM={d}",)
    split = grader.RawKernel(solution_source(f"splitk_fwd_d{d}"), "splitk_fwd", options=opts).compile()
    split.max_dynamic_shared_size_bytes = max(split.max_dynamic_shared_size_bytes, splitk_shared_bytes(d))
    return split, grader.RawKernel(solution_source(f"decode_merge_d{d}"), "decode_merge", options=opts).compile()


def launcher(split, merge, q, k, v, lengths, splits):
    """(run_split, run_merge, O, L): the two launches on the current stream with `splits` chunks per head. O and L
    have q_tiles * SPLITK_ROWS rows per head, the first S_q of them the answer."""
    xp = grader.xp
    B, H, S_q, d = q.shape
    tiles = splitk_tiles(S_q)
    O_part = xp.empty((B, H, tiles, splits, SPLITK_ROWS, d), np.float32)
    L_part = xp.empty((B, H, tiles, splits, SPLITK_ROWS), np.float32)
    O, L = xp.empty((B, H, tiles * SPLITK_ROWS, d), np.float16), xp.empty((B, H, tiles * SPLITK_ROWS), np.float32)
    split_args = (q, k, v, lengths, O_part, L_part, np.int32(S_q), np.int32(k.shape[2]), np.int32(H),
                  np.int32(splits), np.float32(1 / math.sqrt(d)))
    merge_args = (O_part, L_part, O, L, np.int32(SPLITK_ROWS), np.int32(splits))

    def run_split():
        split((tiles, splits, B * H), SPLITK_THREADS, split_args, shared_mem=splitk_shared_bytes(d))

    def run_merge():  # a query tile is the merge's head of n_q = SPLITK_ROWS queries
        merge((tiles * H, B), MERGE_THREADS, merge_args)

    return run_split, run_merge, O, L


def end_to_end(B=2, H=2, S_q=100, N=300, d=64, lengths=(300, 150), splits=3, seed=0):
    """Split + merge on a small padded batch against the float64 reference: (max |O - ref|, max |L - ref|)."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, H, S_q, d)).astype(np.float16)
    k, v = (rng.standard_normal((B, H, N, d)).astype(np.float16) for _ in range(2))
    lens = np.asarray(lengths, np.int32)
    run_split, run_merge, O, L = launcher(*kernels(d), *(grader.to_device(a) for a in (q, k, v, lens)), splits)
    run_split()
    run_merge()
    want_o, want_l = ref.attention_forward(q, k, v, scale=1 / math.sqrt(d), key_lengths=lens)
    return (float(np.abs(grader.to_host(O)[:, :, :S_q].astype(np.float64) - want_o).max()),
            float(np.abs(grader.to_host(L)[:, :, :S_q] - want_l).max()))


def check_all(backend: str):
    """Every splitk_fwd exercise's check (grading cases too) and an end-to-end launch per d; exits on a failure."""
    decode.check_all(backend, EXERCISES, [(f"split + merge (d={d})", functools.partial(end_to_end, d=d))
                                          for d in (64, 128)])


def sweep_counts(N: int, chosen: int) -> list[int]:
    return sorted({s for s in SWEEP_SPLITS if math.ceil(N / s) >= MIN_SWEEP_CHUNK} | {1, chosen})


def gpu_main(out: Path, merged: bool = False):
    import cupy
    import torch
    import torch.nn.functional as F

    start = time.perf_counter()
    check_all("gpu")
    device = torch.cuda.get_device_name()
    measure, stream, torch_stream = decode.gpu_timing(BUDGET, REPEATS)
    timing = dict(min_runs=BUDGET.min_runs, min_ms=BUDGET.min_ms, max_ms=BUDGET.max_ms, warmup_ms=BUDGET.warmup_ms,
                  repeats=REPEATS)
    sig = benchmark._sig

    records, sweep, lines, done = [], [], [], 0
    for d in (128, 64):
        split, merge = kernels(d)
        for B, H, S_q, N in SHAPES:
            gen = torch.Generator(device="cuda").manual_seed(0)
            q = torch.randn(B, H, S_q, d, device="cuda", dtype=torch.float16, generator=gen)
            k, v = (torch.randn(B, H, N, d, device="cuda", dtype=torch.float16, generator=gen) for _ in range(2))
            lengths = torch.full((B,), N, device="cuda", dtype=torch.int32)
            tensors = [cupy.from_dlpack(t) for t in (q, k, v, lengths)]
            flops = 4.0 * B * H * S_q * N * d
            tiles = splitk_tiles(S_q)
            with torch.cuda.stream(torch_stream):
                want = F.scaled_dot_product_attention(q, k, v).float()
            torch.cuda.synchronize()
            base = decode.sdpa_times(q, k, v, measure, torch_stream, f"B={B} H={H} S_q={S_q} N={N} d={d}")

            chosen = choose_fwd_splits(B, H, S_q, N, d=d)
            times = {}
            for splits in sweep_counts(N, chosen):
                with stream:
                    run_split, run_merge, O, _ = launcher(split, merge, *tensors, splits)
                    run_split()
                    run_merge()
                stream.synchronize()
                err = float((torch.from_dlpack(O)[:, :, :S_q].float() - want).abs().max())
                if err > 2e-2 * float(want.abs().max()):
                    raise SystemExit(f"split + merge at B={B} H={H} S_q={S_q} N={N} d={d} splits={splits} differs "
                                     f"from SDPA by {err:.3g}")

                def both(run_split=run_split, run_merge=run_merge):
                    run_split()
                    run_merge()
                times[splits] = measure(both)
                ms = float(np.median(times[splits]))
                row = dict(B=B, H=H, S_q=S_q, S=N, d=d, splits=splits, blocks=tiles * B * H * splits,
                           ms=sig(ms), tflops=sig(flops / ms / 1e9), chosen=splits == chosen, max_abs_err_vs_sdpa=err)
                if splits == chosen:
                    row["merge_ms"] = sig(float(np.median(measure(run_merge))))
                sweep.append(row)
                line = (f"sweep d={d} B={B:2d} H={H:2d} S_q={S_q:5d} N={N:6d} splits={splits:3d} "
                        f"blocks={row['blocks']:6d}: {ms:8.4f} ms {row['tflops']:6.1f} TFLOP/s"
                        + (f" (merge {row['merge_ms']} ms)" if "merge_ms" in row else ""))
                print(line, flush=True)
                lines.append(line)

            for label, splits in ((f"splitk_fwd_d{d}", chosen), (f"splitk_nosplit_d{d}", 1)):
                ms = float(np.median(times[splits]))
                row = next(r for r in sweep if (r["B"], r["H"], r["S_q"], r["S"], r["d"], r["splits"]) ==
                           (B, H, S_q, N, d, splits))
                rec = dict(kernel=label, dtype="fp16", d=d, causal=False, B=B, H=H, S=N, ms=sig(ms),
                           tflops=sig(flops / ms / 1e9), baseline="sdpa_flash", baseline_tflops=None, ratio=None,
                           S_q=S_q, N=N, splits=splits, blocks=row["blocks"],
                           blocks_per_sm=sig(row["blocks"] / H100_SXM.sms), repeat_ms=[sig(t) for t in times[splits]],
                           run_to_run=sig(benchmark.run_to_run_spread(times[splits])),
                           max_abs_err_vs_sdpa=row["max_abs_err_vs_sdpa"], device=device,
                           source="notebooks/10_decoding")
                if "merge_ms" in row:
                    rec["merge_ms"] = row["merge_ms"]
                rec.update(decode.sdpa_fields(base, ms, flops))
                records.append(rec)
                line = (f"{label:20s} B={B:2d} H={H:2d} S_q={S_q:5d} N={N:6d} splits={splits:3d}: {ms:8.4f} ms "
                        f"{rec['tflops']:6.1f} TFLOP/s | SDPA flash {rec.get('baseline_ms')} ms "
                        f"({rec['baseline_tflops']} TFLOP/s, ratio {rec['ratio']}) | cuDNN {rec.get('cudnn_ms')} ms "
                        f"({rec.get('cudnn_tflops')} TFLOP/s)")
                print(line, flush=True)
                lines.append(line)
            del tensors, q, k, v, want
            torch.cuda.empty_cache()
            done += 1
            # written after every shape, so that a run cut short keeps what it measured (and says so)
            decode.write_results(out, "bench_10_splitk.py", merged,
                                 dict(device=device, sms=H100_SXM.sms, shapes_done=done, shapes=2 * len(SHAPES),
                                      timing=timing, seconds=round(time.perf_counter() - start)),
                                 dict(bench=records, sweep=sweep), lines)
    print(f"({time.perf_counter() - start:.0f} s on the GPU)")
    return records


if __name__ == "__main__":
    decode.cli(functools.partial(decode.emulator_main, check_all), gpu_main, RESULTS / "splitk_forward.json")

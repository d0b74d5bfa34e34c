"""Module 12 on a GPU: the Triton solutions checked, then the FA2 forward and backward timed beside
PyTorch's SDPA (flash backend, the baseline) and cuDNN, at the course's benchmark shape.

    GRADER_BACKEND=gpu python benchmarks/bench_12_triton.py [--out DIR] [--source-dir DIR]

Validate first: every Triton exercise's solution (read from notebooks/12_triton, or from
``--source-dir`` files named ``<launcher>.py``) runs its check on the GPU, then each configuration
(fp16/bf16 x d 64/128 x causal or not, B=4, H=16, S=4096) is compared with SDPA's output and
timed with CUDA events (warm-up, which also runs Triton's autotuner, then the median of several
batches), in four rounds with SDPA flash and cuDNN, every other round in reverse order
(``time_in_turn``). The backward (exercise 4, ``flash_backward``: preprocess, dK/dV and dQ kernels) is timed
for fp16/bf16 x d 64/128, not causal, beside SDPA's backward (``out.backward(dO)`` on the SDPA output,
flash backend, then cuDNN), its gradients compared with SDPA's; its FLOPs are 2.5x the forward's
(5 matrix products of the forward's 2 per block). Writes ``triton.json`` (a ``bench`` list in the record
format of gpu_evidence.json, ``kernel`` = ``triton_flash_fwd`` or ``triton_flash_bwd``) and
``triton.txt`` (the tables) to ``--out``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHAPE = dict(B=4, H=16, S=4096)
EXERCISES = ("triton_softmax", "triton_flash_forward", "triton_flash_forward_causal", "triton_flash_backward")
BWD_FLOPS = 2.5  # the backward's FLOPs over the forward's: dV, dP, dQ, dK and the recomputed S, against S and PV
REPEATS = 4  # rounds of the kernel, SDPA flash and cuDNN timed in turn


def sources(source_dir: str | None) -> dict:
    from grader.checks import get_exercise
    from grader.course import solution_source

    out = {}
    for ex_id in EXERCISES:
        ex = get_exercise(ex_id)
        if source_dir is None:
            out[ex_id] = solution_source(ex_id)
        elif (Path(source_dir) / f"{ex.kernel}.py").exists():  # a student's folder may hold only some
            out[ex_id] = (Path(source_dir) / f"{ex.kernel}.py").read_text()
    return out


def time_ms(torch, fn, batches=7, per_batch=10, warm_ms=300.0) -> tuple[float, list]:
    """The median of ``batches`` batches of back-to-back launches, after ``warm_ms`` of launches: the
    first call compiles and autotunes, and a GPU that has just been idle (or busy autotuning) takes a
    few hundred milliseconds to settle at its steady clocks (the batches of the first configuration
    timed fell by 5% from first to last before this warm-up was added)."""
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    while (time.perf_counter() - start) * 1e3 < warm_ms:
        fn()
        torch.cuda.synchronize()
    medians = []
    for _ in range(batches):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(per_batch):
            fn()
        end.record()
        torch.cuda.synchronize()
        medians.append(start.elapsed_time(end) / per_batch)
    return statistics.median(medians), medians


def time_in_turn(torch, fns, repeats=REPEATS) -> list:
    """Per function of ``fns`` (None: not timed, None back), the median of its ``repeats`` medians and
    those medians: each repeat times every function with :func:`time_ms` (its own warm-up included),
    every other repeat in reverse order. A GPU at its power limit runs a kernel at a clock that the one
    before it left and that drifts as it heats: taken in turn, no function always follows the same
    one, and the spread of its repeats shows how far the run moved it."""
    from grader.benchmark import in_turn

    live = [i for i, fn in enumerate(fns) if fn is not None]
    medians = {i: [] for i in live}
    for i in in_turn(live, repeats):
        medians[i].append(time_ms(torch, fns[i])[0])
    return [(statistics.median(medians[i]), medians[i]) if i in medians else None for i in range(len(fns))]


def sdpa(torch, backend, q, k, v, causal):
    from torch.nn.attention import sdpa_kernel

    F = torch.nn.functional

    def run():
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    try:
        run()
    except RuntimeError as err:
        return None, str(err).splitlines()[0]
    return run, None


def sdpa_backward(torch, backend, q, k, v, do):
    """(run, grads, None): ``run`` times SDPA's backward alone (the forward is taken once, outside),
    ``grads`` its (dq, dk, dv); or (None, None, why) where the backend refuses the configuration."""
    from torch.nn.attention import sdpa_kernel

    F = torch.nn.functional
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    try:
        with sdpa_kernel(backend):
            out = F.scaled_dot_product_attention(*leaves)

        def run():
            for t in leaves:
                t.grad = None
            with sdpa_kernel(backend):
                out.backward(do, retain_graph=True)
        run()
    except RuntimeError as err:
        return None, None, str(err).splitlines()[0]
    return run, [t.grad for t in leaves], None


def bench_backward(torch, triton, fwd, bwd, dtype_name, dtype, d, device, source) -> dict:
    """One backward record: ``flash_backward`` on the outputs of the Triton forward, beside SDPA's."""
    from torch.nn.attention import SDPBackend

    B, H, S = SHAPE["B"], SHAPE["H"], SHAPE["S"]
    g = torch.Generator(device="cuda").manual_seed(1)
    q, k, v, do = (torch.randn(B, H, S, d, device="cuda", dtype=dtype, generator=g) for _ in range(4))
    scale = d ** -0.5
    o = torch.empty_like(q)
    lse = torch.empty(B, H, S, device="cuda", dtype=torch.float32)
    fwd(q, k, v, o, lse, scale)
    dq, dk, dv = (torch.empty(B, H, S, d, device="cuda", dtype=torch.float32) for _ in range(3))
    run = lambda: bwd(q, k, v, o, lse, do, dq, dk, dv, scale)  # noqa: E731
    run()  # compiles and autotunes; its gradients are compared below
    flops = BWD_FLOPS * 4.0 * B * H * S * S * d
    rec = dict(kernel="triton_flash_bwd", dtype=dtype_name, d=d, causal=False, B=B, H=H, S=S, device=device,
               source=source, triton=triton.__version__, torch=torch.__version__)
    flash, grads, why_flash = sdpa_backward(torch, SDPBackend.FLASH_ATTENTION, q, k, v, do)
    if flash is not None:
        rec["max_abs_err_vs_sdpa"] = {name: float((mine - ref.float()).abs().max())
                                      for name, mine, ref in zip(("dq", "dk", "dv"), (dq, dk, dv), grads)}
    cudnn, _, why_cudnn = sdpa_backward(torch, SDPBackend.CUDNN_ATTENTION, q, k, v, do)
    return rec | timing_fields(flops, time_in_turn(torch, [run, flash, cudnn]), why_flash, why_cudnn)


def timing_fields(flops, timed, why_flash, why_cudnn) -> dict:
    """A record's times from :func:`time_in_turn` over (the kernel, SDPA flash, cuDNN): ms and TFLOP/s,
    each one's per-repeat medians, the ratios (speeds: the other's time over the kernel's)."""
    (ms, reps), flash, cudnn = timed
    rec = dict(ms=round(ms, 4), tflops=round(flops / ms / 1e9, 1), repeat_ms=[round(x, 4) for x in reps])
    if flash is not None:
        rec.update(baseline="sdpa_flash", baseline_ms=round(flash[0], 4), baseline_tflops=round(flops / flash[0] / 1e9, 1),
                   ratio=round(flash[0] / ms, 3), baseline_repeat_ms=[round(x, 4) for x in flash[1]])
    else:
        rec.update(baseline="sdpa_flash", baseline_tflops=None, ratio=None, baseline_refused=why_flash)
    if cudnn is not None:
        rec.update(cudnn_ms=round(cudnn[0], 4), cudnn_tflops=round(flops / cudnn[0] / 1e9, 1),
                   cudnn_ratio=round(cudnn[0] / ms, 3), cudnn_repeat_ms=[round(x, 4) for x in cudnn[1]])
    else:
        rec["cudnn_refused"] = why_cudnn
    return rec


def tuned_config(module) -> str | None:
    """What the module's autotuner (a ``triton.autotune`` object among its globals) chose at its last
    launch, as ``128x64 w8 s3`` (BLOCK_M x BLOCK_N, warps, stages); None for a module that does not tune."""
    for obj in vars(module).values():
        cfg = getattr(obj, "best_config", None)
        if cfg is not None and hasattr(obj, "configs") and hasattr(cfg, "kwargs"):
            kw = cfg.kwargs
            return f"{kw.get('BLOCK_M', '?')}x{kw.get('BLOCK_N', '?')} w{cfg.num_warps} s{cfg.num_stages}"
    return None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None, help="default: benchmarks/results for the course's solutions, "
                    "triton_bench/ for --source-dir (never the committed results)")
    ap.add_argument("--source-dir", default=None, help="your launchers as files named after them (flash_forward.py, "
                    "...); those present are checked and timed")
    a = ap.parse_args()
    a.out = a.out or os.environ.get("OUT") or ("triton_bench" if a.source_dir else "benchmarks/results")
    os.environ.setdefault("GRADER_BACKEND", "gpu")
    import torch
    import triton
    from torch.nn.attention import SDPBackend

    from grader.checks import run_check
    from grader.triton_support import load_module

    src = sources(a.source_dir)
    lines, checks = [], {}
    for ex_id, text in src.items():
        r = run_check(ex_id, text, include_hidden=True, seed=1234)
        checks[ex_id] = dict(passed=r.passed, cases=len(r.results))
        lines.append(r.summary())
        if not r.passed:
            lines.append(r.first_failure.message)
    print("\n".join(lines), flush=True)

    modules = {}

    def launcher(ex_id, name):
        if ex_id not in src:
            return None
        modules[name] = load_module("\n" + src[ex_id], name)[0]
        return getattr(modules[name], name)

    fwd = launcher("triton_flash_forward", "flash_forward")
    fwd_causal = launcher("triton_flash_forward_causal", "flash_forward_causal")
    device = torch.cuda.get_device_name()
    B, H, S = SHAPE["B"], SHAPE["H"], SHAPE["S"]
    records = []
    for dtype_name, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        for d in (64, 128):
            for causal in (False, True):
                if (fwd_causal if causal else fwd) is None:
                    continue
                g = torch.Generator(device="cuda").manual_seed(0)
                q, k, v = (torch.randn(B, H, S, d, device="cuda", dtype=dtype, generator=g) for _ in range(3))
                o = torch.empty_like(q)
                lse = torch.empty(B, H, S, device="cuda", dtype=torch.float32)
                mine = fwd_causal if causal else fwd
                run = lambda: mine(q, k, v, o, lse, d ** -0.5)  # noqa: E731
                run()  # compiles and autotunes
                flops = 4.0 * B * H * S * S * d / (2 if causal else 1)
                rec = dict(kernel="triton_flash_fwd", dtype=dtype_name, d=d, causal=causal, B=B, H=H, S=S, device=device,
                           source=a.source_dir or "notebooks/12_triton", triton=triton.__version__, torch=torch.__version__)
                config = tuned_config(modules["flash_forward_causal" if causal else "flash_forward"])
                if config:
                    rec["config"] = config
                flash, why_flash = sdpa(torch, SDPBackend.FLASH_ATTENTION, q, k, v, causal)
                if flash is not None:
                    rec["max_abs_err_vs_sdpa"] = float((o.float() - flash().float()).abs().max())
                cudnn, why_cudnn = sdpa(torch, SDPBackend.CUDNN_ATTENTION, q, k, v, causal)
                rec |= timing_fields(flops, time_in_turn(torch, [run, flash, cudnn]), why_flash, why_cudnn)
                records.append(rec)
                print(json.dumps(rec), flush=True)

    bwd = launcher("triton_flash_backward", "flash_backward")
    for dtype_name, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)) if fwd and bwd else ():
        for d in (64, 128):
            rec = bench_backward(torch, triton, fwd, bwd, dtype_name, dtype, d, device,
                                 a.source_dir or "notebooks/12_triton")
            records.append(rec)
            print(json.dumps(rec), flush=True)
            torch.cuda.empty_cache()

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    command = "GRADER_BACKEND=gpu python benchmarks/bench_12_triton.py" + (f" --source-dir {a.source_dir}" if a.source_dir else "")
    (out / "triton.json").write_text(json.dumps(dict(device=device, command=command, checks=checks, bench=records),
                                                indent=1) + "\n")
    head = f"{'dtype':5} {'d':>4} {'causal':>6} {'ms':>8} {'TFLOP/s':>8} {'SDPA flash':>10} {'ratio':>6} {'cuDNN':>7} {'ratio':>6}"
    rows = []
    for kernel, title in (("triton_flash_fwd", "forward"), ("triton_flash_bwd", f"backward ({BWD_FLOPS:g}x the forward's FLOPs)")):
        tuned = any("config" in r for r in records if r["kernel"] == kernel)  # the autotuner's choice, last
        rows += [title, head + ("  autotuned" if tuned else "")] + [
            f"{r['dtype']:5} {r['d']:>4} {str(r['causal']):>6} {r['ms']:>8.3f} {r['tflops']:>8.1f} "
            f"{r.get('baseline_tflops') or 0:>10.1f} {r.get('ratio') or 0:>6.2f} {r.get('cudnn_tflops', 0):>7.1f} "
            f"{r.get('cudnn_ratio', 0):>6.2f}" + (f"  {r.get('config', '')}" if tuned else "")
            for r in records if r["kernel"] == kernel]
    (out / "triton.txt").write_text(f"{device}, B={B} H={H} S={S}\n" + "\n".join(rows) + "\n")
    print("\n".join(rows))


if __name__ == "__main__":
    main()

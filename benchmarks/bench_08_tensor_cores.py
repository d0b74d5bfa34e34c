"""GPU evidence for module 08: every solution kernel of notebooks/08_tensor_cores, checked, then timed.

The matmuls through `grader.bench` (cuBLAS baseline, 4096^3); the flash forward, whose element
type is a compile-time option (so `grader.bench` cannot read it from the signature), with the
same timer beside PyTorch's SDPA flash backend at B=4, H=16, S=4096, fp16 and bf16, d 64 and 128.

    PYTHONPATH=. GRADER_BACKEND=gpu python3 benchmarks/bench_08_tensor_cores.py OUT.json
"""
from __future__ import annotations

import json
import math
import sys

import numpy as np

import grader
from grader.benchmark import Budget, EventTimer, bench
from grader import reference as ref
from grader.checks import TOLERANCES, run_check
from grader.course import solution_source


def flash_records(B=4, H=16, S=4096, repeats=3):
    import cupy
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    source = solution_source("tc_flash_fwd_d64")
    timer, budget = EventTimer(), Budget(min_runs=10, min_ms=300.0, max_ms=3000.0)
    stream = cupy.cuda.Stream(non_blocking=True)
    records = []
    for dtype in ("fp16", "bf16"):
        for d in (64, 128):
            tdt = torch.float16 if dtype == "fp16" else torch.bfloat16
            gen = torch.Generator(device="cuda").manual_seed(0)
            q, k, v = (torch.randn(B, H, S, d, device="cuda", dtype=tdt, generator=gen) for _ in range(3))
            o, lse = torch.empty_like(q), torch.empty(B, H, S, device="cuda", dtype=torch.float32)
            kern = grader.RawKernel(source, "tc_flash_fwd", options=(f"-DHEAD_DIM={d}", f"-DELEM_BF16={int(dtype == 'bf16')}"))
            kern.compile()
            raw = kern._compiled._kernel
            args = tuple(np.uint64(t.data_ptr()) for t in (q, k, v, o, lse)) + (np.int32(S), np.float32(1 / math.sqrt(d)))
            torch_stream = torch.cuda.ExternalStream(stream.ptr)

            def ours():  # on the current CuPy stream: the timer's, or `stream` below
                raw((math.ceil(S / 64), H, B), (128,), args)

            with stream:
                ours()
            stream.synchronize()
            with torch.cuda.stream(torch_stream):
                err = float((o.float() - F.scaled_dot_product_attention(q, k, v).float()).abs().max())

            def sdpa():
                with sdpa_kernel(SDPBackend.FLASH_ATTENTION), torch.cuda.stream(torch_stream):
                    F.scaled_dot_product_attention(q, k, v)

            ms = float(np.median([budget.measure(timer, ours, stream).median for _ in range(repeats)]))
            base = float(np.median([budget.measure(timer, sdpa, stream).median for _ in range(repeats)]))
            flops = 4 * B * H * S * S * d
            rec = dict(kernel=f"tc_flash_fwd_d{d}", dtype=dtype, d=d, causal=False, B=B, H=H, S=S, ms=round(ms, 4),
                       tflops=round(flops / ms / 1e9, 1), baseline="sdpa_flash", baseline_tflops=round(flops / base / 1e9, 1),
                       ratio=round(base / ms, 3), max_abs_err_vs_sdpa=err, source="notebooks/08_tensor_cores",
                       device=torch.cuda.get_device_name())
            records.append(rec)
            print(rec, flush=True)
    return records


def bf16_check(source):
    """The bf16 build against the float64 reference (the grader's checks compare fp16 outputs only)."""
    rtol, atol = TOLERANCES[("bfloat16", "gpu")]
    for B, H, N, d in [(1, 2, 100, 64), (2, 1, 257, 128)]:
        rng = np.random.default_rng(N)
        bits = [(rng.standard_normal((B, H, N, d)).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
                for _ in range(3)]
        kern = grader.RawKernel(source, "tc_flash_fwd", options=(f"-DHEAD_DIM={d}", "-DELEM_BF16=1"))
        O, L = grader.empty((B, H, N, d), np.uint16), grader.empty((B, H, N))
        kern((math.ceil(N / 64), H, B), 128, tuple(grader.to_device(b) for b in bits) + (O, L, np.int32(N), np.float32(d ** -0.5)))
        as_float = [(b.astype(np.uint32) << 16).view(np.float32) for b in bits]
        o_ref, l_ref = ref.attention_forward(*as_float, scale=d ** -0.5)
        o = (grader.to_host(O).astype(np.uint32) << 16).view(np.float32)
        ok = bool(np.all(np.abs(o - o_ref) <= atol + rtol * np.abs(o_ref)))
        print(f"bf16 N={N} d={d}: max |O - ref| {np.abs(o - o_ref).max():.2e}, max |L - ref| "
              f"{np.abs(grader.to_host(L) - l_ref).max():.2e}, within tolerance: {ok}", flush=True)
        if not ok:
            raise SystemExit("the bf16 build fails on the GPU")


def main(out):
    records = []
    for exercise in ("wmma_matmul", "mma_matmul"):
        report = bench(exercise, solution_source(exercise), repeats=3)
        print(report.table(), flush=True)
        records.append(report.record() | {"source": "notebooks/08_tensor_cores"})
    for exercise in ("qk_scores_mma", "tc_flash_fwd_d64", "tc_flash_fwd_d128"):
        result = run_check(exercise, solution_source(exercise), include_hidden=True, backend="gpu", seed=1)
        print(result.summary(), flush=True)
        if not result.passed:
            raise SystemExit(f"{exercise} fails on the GPU")
    bf16_check(solution_source("tc_flash_fwd_d64"))
    records += flash_records()
    with open(out, "w") as f:
        json.dump({"bench": records}, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])

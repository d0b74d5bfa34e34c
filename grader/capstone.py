"""``python -m grader bench capstone FILE``: module 11's kernel timed in every configuration
(fp16/bf16 x d 64/128 x causal/not) with the launch choices of the committed GPU run
(benchmarks/results/capstone.json), beside SDPA's flash backend (the target) and cuDNN. Each build
is checked on its visible cases before it is timed."""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from . import benchspec
from .backend import backend as active_backend
from .errors import BackendUnavailableError
from .benchmark import BenchReport, Budget, EventTimer, bench, kernel_source
from .exercise_rows import REGISTRY
from .exercises import m11_capstone as m11
from .kernel import RawKernel

FLASH, CUDNN = "FLASH_ATTENTION", "CUDNN_ATTENTION"


def build(dtype: str, d: int, causal: bool, cfg: dict | None = None) -> str:
    """The exercise id of one build of the capstone row, registered for this process so that the
    checks, the benchmark and the tuner accept it like any exercise."""
    ex, spec = m11.variant(d, dtype, causal, cfg, register=False)
    REGISTRY.setdefault(ex.id, ex)
    benchspec.SPECS.setdefault(ex.id, spec)
    return ex.id


@dataclass
class Row:
    dtype: str
    d: int
    causal: bool
    S: int
    cfg: dict
    report: BenchReport

    def _baseline(self, backend):
        return next((b for b in self.report.baselines if b.backend == backend and b.ran), None)

    def cells(self) -> list[str]:
        k, flash, cudnn = self.report.kernel, self._baseline(FLASH), self._baseline(CUDNN)
        if not self.report.check_passed:
            return [self.dtype, str(self.d), "yes" if self.causal else "no", str(self.S),
                    "check failed: " + self.report.check_message.splitlines()[0][:60], "", "", "", "", ""]
        choices = " ".join(f"{name}={value}" for name, value in self.cfg.items())
        return [self.dtype, str(self.d), "yes" if self.causal else "no", str(self.S), choices, f"{k.ms:.4g}",
                f"{k.tflops:.4g}",
                f"{flash.tflops:.4g} ({flash.ms / k.ms:.2f}x)" if flash else "-",
                f"{cudnn.tflops:.4g} ({cudnn.ms / k.ms:.2f}x)" if cudnn else "-",
                "" if flash is None or flash.ms / k.ms >= 1.0 else "below SDPA flash"]


HEADER = ["dtype", "d", "causal", "S", "choices", "ms", "TFLOP/s", "SDPA flash TFLOP/s (yours vs it)",
          "cuDNN TFLOP/s (yours vs it)", ""]


def _aligned(lines: list[list[str]]) -> str:
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in lines)


def table(rows: list[Row]) -> str:
    return _aligned([HEADER] + [r.cells() for r in rows])


def bench_capstone(kernel, *, seqs=(4096,), configs=None, choices: dict | None = None, repeats: int = 1,
                   budget: Budget | None = None, baselines: bool = True) -> list[Row]:
    """Check and time ``kernel`` (its source, or the kernel ``%%cuda`` made) in each of ``configs``
    ((dtype, d, causal) triples; default all 8) at B=4, H=16 and every S of ``seqs``. The launch
    choices are ``choices`` where given (one dict for every configuration), else the ones tuned on
    the committed GPU run (benchmarks/results/capstone.json) at each S, else the graded rows' (m11_capstone.CONFIG)."""
    if active_backend() != "gpu":
        raise BackendUnavailableError(
            "python -m grader bench capstone times your kernel on a GPU; the CPU emulator does not model speed. "
            "Here, check it instead: python -m grader check capstone_fwd_d64 FILE --all (and capstone_fwd_d128, "
            "capstone_fwd_causal_d64, capstone_fwd_bf16_causal_d128, the builds that are graded).")
    tuned = {s: m11.tuned_configs(s) for s in seqs}
    rows = []
    for dtype, d, causal in configs or m11.CONFIGS:
        for s in seqs:
            cfg = dict(choices) if choices else tuned[s][(dtype, d, causal)]
            report = bench(build(dtype, d, causal, cfg), kernel, dtype=dtype, shape=dict(S=s), repeats=repeats,
                           budget=budget, baselines=baselines)
            rows.append(Row(dtype, d, causal, s, cfg, report))
    return rows


# --------------------------------------------------------------------------- the backward

@dataclass
class BackwardRow:
    dtype: str
    d: int
    causal: bool
    S: int
    cfg: dict  # {"dkdv": {...}, "dq": {...}}; no "dq" when the dK/dV build adds dQ (FUSED_DQ=1)
    ms: list  # medians of the repeated measurements: ours (D + dK/dV + dQ, or D + zero-fill + fused)
    parts_ms: dict  # "D", "dkdv", "dq" (or "D", "zero", "dkdv" when fused): each alone, one measurement
    baseline_ms: float | None  # SDPA's flash backward
    cudnn_ms: float | None
    max_abs_err: dict  # dQ, dK, dV against SDPA's gradients
    regs: dict  # registers per thread of each part's build

    @property
    def flops(self) -> float:
        p = SimpleNamespace(B=BWD_SHAPE["B"], H=BWD_SHAPE["H"], N=self.S, d=self.d, causal=self.causal)
        return benchspec.SDPA_BWD_FLOPS(p)

    def tflops(self, ms: float) -> float:
        return self.flops / ms / 1e9


BWD_SHAPE = {"B": 4, "H": 16}


def bench_backward(dkdv, dq, *, configs=None, S: int = 4096, choices: dict | None = None,
                   repeats: int = 3, baselines: bool = True) -> list[BackwardRow]:
    """Time the backward made of ``dkdv`` and ``dq`` (sources, or the kernels ``%%cuda`` made) at
    B=4, H=16, N=S in each of ``configs`` (default all 8), beside SDPA's flash and cuDNN backward on
    the same tensors. Ours is D = rowsum(dO * O) (the notebook's capstone_bwd_preprocess, given beside
    dK/dV), then dK/dV, then dQ; SDPA's includes its own preprocessing. O and L come from SDPA's
    flash forward. Each build's gradients are compared with SDPA's before it is timed.
    ``choices``: {"dkdv": {...}, "dq": {...}} launch choices (default: the graded rows'); with
    ``"FUSED_DQ": 1`` among the dK/dV choices, that kernel adds dQ too (into a zero-filled dQ, the
    fill timed with it) and ``dq`` is not launched (it may be None)."""
    if active_backend() != "gpu":
        raise BackendUnavailableError("the backward is timed on a GPU; on the emulator, check it: python -m grader "
                                      "check capstone_bwd_dkdv_d64 FILE --all (and capstone_bwd_dq_d64)")
    import cupy
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel


    F = torch.nn.functional
    timer, budget = EventTimer(), Budget(min_runs=10, min_ms=100.0, max_ms=2000.0)
    stream = cupy.cuda.Stream(non_blocking=True)
    tstream = torch.cuda.ExternalStream(stream.ptr)
    B, H = BWD_SHAPE["B"], BWD_SHAPE["H"]
    rows = []
    for dtype, d, causal in configs or m11.CONFIGS:
        cfg = {part: dict(m11.BWD_CONFIG[part], **((choices or {}).get(part, {}))) for part in ("dkdv", "dq")}
        fused = bool(cfg["dkdv"].get("FUSED_DQ"))
        if fused:
            del cfg["dq"]
        tdtype = torch.bfloat16 if dtype == "bf16" else torch.float16
        gen = torch.Generator(device="cuda").manual_seed(0)
        q, k, v, do = (torch.randn(B, H, S, d, device="cuda", dtype=tdtype, generator=gen) for _ in range(4))
        scale = 1.0 / d ** 0.5
        with torch.cuda.stream(tstream):
            o, lse = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False, scale=scale)[:2]
            qg, kg, vg = (t.detach().requires_grad_(True) for t in (q, k, v))
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                out = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)
            want = torch.autograd.grad(out, (qg, kg, vg), do, retain_graph=True)
        torch.cuda.synchronize()
        lengths = torch.full((B,), S, device="cuda", dtype=torch.int32)
        grads = {n: torch.empty(B, H, S, d, device="cuda", dtype=torch.float32) for n in ("dQ", "dK", "dV")}
        D = torch.empty(B, H, S, device="cuda", dtype=torch.float32)
        cp = {n: cupy.from_dlpack(t) for n, t in dict(q=q, k=k, v=v, do=do, lse=lse.contiguous(), D=D, lengths=lengths,
                                                     **grads).items()}
        launches, regs = {}, {}
        for part, fn in (("dkdv", dkdv), ("dq", dq))[:1 if fused else 2]:
            c = cfg[part]
            options = (f"-DHEAD_DIM={d}",) + (("-DELEM_BF16=1",) if dtype == "bf16" else ()) + \
                (("-DCAUSAL=1",) if causal else ()) + tuple(f"-D{key}={val}" for key, val in c.items())
            kern = RawKernel(kernel_source(fn, "bench_backward"), f"capstone_bwd_{part}", options=options).compile()
            smem = m11.bwd_shared_bytes(part, d, c)
            kern.max_dynamic_shared_size_bytes = smem
            outs = (cp["dK"], cp["dV"], cp["dQ"]) if part == "dkdv" else (cp["dQ"],)
            args = (cp["q"], cp["k"], cp["v"], cp["do"], cp["lse"], cp["D"], cp["lengths"], *outs, np.int32(S),
                    np.float32(scale))
            grid = (-(-S // m11.bwd_block_rows(part, c)), H, B)
            launches[part] = lambda kern=kern, grid=grid, c=c, args=args, smem=smem: kern(
                grid, 32 * c["WARPS"], args, shared_mem=smem)
            regs[part] = kern.registers_per_thread()

        pre = RawKernel(kernel_source(dkdv, "bench_backward"), "capstone_bwd_preprocess",
                        options=(f"-DHEAD_DIM={d}",) + (("-DELEM_BF16=1",) if dtype == "bf16" else ())).compile()
        o_cp, rows_total = cupy.from_dlpack(o), B * H * S
        pre_args = (o_cp, cp["do"], cp["D"], np.int32(rows_total))

        def preprocess():
            pre((-(-rows_total * d // 8 // 256),), 256, pre_args)

        def zero():
            cp["dQ"].fill(0)

        def ours():
            preprocess()
            if fused:
                zero()
            launches["dkdv"]()
            if not fused:
                launches["dq"]()

        with stream:
            ours()
        stream.synchronize()
        err = {n: float((grads[n] - w.float()).abs().max()) for n, w in zip(("dQ", "dK", "dV"), want)}
        times = [budget.measure(timer, ours, stream).median for _ in range(repeats)]
        parts = {"D": budget.measure(timer, preprocess, stream).median,
                 **({"zero": budget.measure(timer, zero, stream).median} if fused else {}),
                 **{p: budget.measure(timer, launches[p], stream).median for p in launches}}
        base = {"flash": None, "cudnn": None}
        for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION))[:2 * baselines]:
            try:
                with torch.cuda.stream(tstream), sdpa_kernel(backend):
                    out_b = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)

                def sdpa(out_b=out_b):
                    with torch.cuda.stream(tstream):
                        torch.autograd.grad(out_b, (qg, kg, vg), do, retain_graph=True)
                sdpa()
                torch.cuda.synchronize()
                base[name] = budget.measure(timer, sdpa, stream).median
            except RuntimeError:
                base[name] = None
        rows.append(BackwardRow(dtype, d, causal, S, cfg, times, parts, base["flash"], base["cudnn"], err, regs))
        del q, k, v, do, o, lse, qg, kg, vg, out, want, grads, cp, launches
        torch.cuda.empty_cache()
    return rows


def backward_table(rows: list[BackwardRow]) -> str:
    head = ["dtype", "d", "causal", "S", "ms (D + dK/dV + dQ, or D + 0 + fused)", "TFLOP/s", "SDPA flash (yours vs it)",
            "cuDNN (yours vs it)", "max |err| dQ dK dV"]
    lines = [head]
    for r in rows:
        ms = float(np.median(r.ms))
        lines.append([r.dtype, str(r.d), "yes" if r.causal else "no", str(r.S),
                      f"{ms:.4g} ({' + '.join(f'{t:.3g}' for t in r.parts_ms.values())})",
                      f"{r.tflops(ms):.4g}",
                      f"{r.tflops(r.baseline_ms):.4g} ({r.baseline_ms / ms:.2f}x)" if r.baseline_ms else "-",
                      f"{r.tflops(r.cudnn_ms):.4g} ({r.cudnn_ms / ms:.2f}x)" if r.cudnn_ms else "-",
                      " ".join(f"{r.max_abs_err[n]:.1e}" for n in ("dQ", "dK", "dV"))])
    return _aligned(lines)

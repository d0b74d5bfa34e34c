"""Benchmarking a kernel on a GPU: correct first, then timed against a library baseline.

    report = grader.bench("flash_fwd_row", code, shape={"S": 2048})
    print(report.table())

1. The kernel must pass its exercise's visible cases (the same check as ``grader.check``);
   a failing kernel is not timed and the report says why.
2. Inputs are built on the device at benchmark size and every launch is timed with CUDA
   events on the current stream. A buffer twice the size of the L2 cache is rewritten
   before each timed run, outside the timed region, so no run finds the previous run's
   data in cache. After warm-up, runs continue until there are at least ``min_runs`` of
   them and ``min_ms`` of timed work (``max_ms`` stops slow kernels early).
3. Declared FLOPs and bytes (``grader.benchspec``) turn times into TFLOP/s and GB/s.
4. Baselines run the same way on the same shape: PyTorch's ``scaled_dot_product_attention``
   under each named backend, cuBLAS through ``cupy.matmul``, ``torch.softmax``.

The CPU emulator does not model speed, so on it :func:`bench` refuses.
"""
from __future__ import annotations

import contextlib
import json
import math
import re
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

import numpy as np

from .backend import backend as active_backend
from .benchspec import DTYPES, ITEMSIZE, SDPA_BWD_BYTES, SDPA_BWD_FLOPS, device_inputs, get_spec, parse_shape
from .errors import BackendUnavailableError, CourseError

REFUSAL = ("the CPU emulator does not model a GPU's speed, so it cannot benchmark a kernel: "
           "to see the memory traffic your kernel makes, run python -m grader profile {exercise} file.cu")

RECORD_KEYS = ("kernel", "dtype", "d", "causal", "B", "H", "S", "ms", "tflops", "baseline", "baseline_tflops", "ratio")
IDENTITY = ("kernel", "dtype", "d", "causal", "B", "H", "S")
# Shapes that are not attention shapes (matmul, softmax) leave B, H, S or d empty; their own
# dimensions then tell two records of one kernel apart.
SHAPE_EXTRAS = ("M", "N", "K", "rows", "cols")
SPEED_OF_LIGHT = "FLASH_ATTENTION"  # the reference for fp32 kernels: fp16 attention on tensor cores


# --------------------------------------------------------------------------- statistics


@dataclass(frozen=True)
class Stats:
    """Times of one series of runs, in milliseconds."""

    samples: tuple
    median: float
    min: float
    p10: float
    p90: float

    @property
    def runs(self) -> int:
        return len(self.samples)

    @property
    def spread(self) -> float:
        """(p90 - p10) / median: the width of the middle 80% of runs, relative to the median."""
        return (self.p90 - self.p10) / self.median if self.median > 0 else 0.0


def summarize(samples) -> Stats:
    s = np.asarray(samples, dtype=np.float64)
    if s.size == 0:
        raise ValueError("no samples to summarize")
    p10, med, p90 = np.percentile(s, [10, 50, 90])
    return Stats(tuple(float(x) for x in s), float(med), float(s.min()), float(p10), float(p90))


def run_to_run_spread(medians) -> float:
    """(max - min) / median of the medians of repeated measurements (0 for a single one)."""
    m = np.asarray(medians, dtype=np.float64)
    return float((m.max() - m.min()) / np.median(m)) if m.size > 1 else 0.0


def sample(run_batch: Callable[[int], list], *, min_runs: int, min_ms: float, max_runs: int,
           max_ms: float, floor: int = 1) -> list:
    """Times from ``run_batch(n)`` (n more runs, their ms) until there are ``min_runs`` runs and
    ``min_ms`` of timed work. Past ``max_ms`` it stops once it has ``floor`` runs, and it never
    exceeds ``max_runs``. Batch sizes come from the median so far, so a kernel of 2 s and
    one of 20 us both get the time they need without a host round trip per run."""
    samples: list = []
    while len(samples) < max_runs:
        n, total = len(samples), sum(samples)
        if n >= min_runs and total >= min_ms:
            break
        if total >= max_ms and n >= floor:
            break
        if n == 0:
            want = 1
        else:
            per_run = max(float(np.median(samples)), 1e-6)
            want = max(min_runs - n, math.ceil((min_ms - total) / per_run), 1)
            within_budget = max(math.ceil((max_ms - total) / per_run), floor - n, 1)
            want = min(want, within_budget)
        samples += list(run_batch(min(want, max_runs - n)))
    return samples


# --------------------------------------------------------------------------- GPU timing

_HELPERS = r"""
extern "C" __global__ void grader_l2_flush(int* buf, unsigned long long n, int value) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x)
        buf[i] = value;
}
extern "C" __global__ void grader_spin(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
}
"""


class EventTimer:
    """Times ``fn()`` with a CUDA event pair per run on one stream, the L2 flushed between runs.

    Runs go in batches of ``BATCH``: the host queues a whole batch behind a short spin kernel
    and synchronises once, so the GPU never waits for Python between a start event and the
    launch it measures."""

    BATCH = 20
    MAX_HEAD_START_NS = 100_000_000

    def __init__(self):
        import cupy

        l2 = int(cupy.cuda.Device().attributes["L2CacheSize"])
        self._buf = cupy.empty(max(2 * l2, 1 << 24) // 4, dtype=cupy.int32)
        module = cupy.RawModule(code=_HELPERS)
        self._flush, self._spin = module.get_function("grader_l2_flush"), module.get_function("grader_spin")
        self._flushes = 0
        self.head_start_ns = 2_000_000  # grows when queuing a batch takes the host longer

    def flush(self):
        """Rewrite the buffer on the current stream (a new value each time, so no write is a no-op)."""
        self._flushes += 1
        self._flush((1024,), (256,), (self._buf, np.uint64(self._buf.size), np.int32(self._flushes)))

    def runs(self, fn: Callable, n: int, stream, before: Callable | None = None) -> list:
        import cupy

        times = []
        with stream:
            while len(times) < n:
                self._spin((1,), (1,), (np.uint64(self.head_start_ns),))
                queued = time.perf_counter()
                events = []
                for _ in range(min(self.BATCH, n - len(times))):
                    if before is not None:
                        before()
                    self.flush()
                    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
                    start.record(stream)
                    fn()
                    stop.record(stream)
                    events.append((start, stop))
                host_ns = (time.perf_counter() - queued) * 1e9
                if host_ns > self.head_start_ns / 2:
                    self.head_start_ns = int(min(2 * host_ns, self.MAX_HEAD_START_NS))
                events[-1][1].synchronize()
                times += [cupy.cuda.get_elapsed_time(a, b) for a, b in events]
        return times


@dataclass(frozen=True)
class Budget:
    """How long to measure: see :func:`sample`. Warm-up runs are discarded."""

    min_runs: int = 10
    min_ms: float = 200.0
    max_ms: float = 5000.0
    max_runs: int = 10000
    warmup_runs: int = 2
    warmup_ms: float = 50.0

    def measure(self, timer: EventTimer, fn, stream, before=None) -> Stats:
        def run(n):
            return timer.runs(fn, n, stream, before)

        sample(run, min_runs=self.warmup_runs, min_ms=self.warmup_ms, max_runs=1000, max_ms=self.max_ms / 5, floor=1)
        return summarize(sample(run, min_runs=self.min_runs, min_ms=self.min_ms, max_runs=self.max_runs,
                                max_ms=self.max_ms, floor=min(3, self.min_runs)))


# --------------------------------------------------------------------------- results


@dataclass
class Measurement:
    """One timed thing: the kernel, or a baseline. ``error`` says why a baseline did not run;
    ``role`` is 'kernel', 'baseline' (same precision) or 'reference' (fp16 speed of light)."""

    name: str
    dtype: str
    role: str
    flops: float | None
    bytes: float
    backend: str | None = None
    repeats: list = field(default_factory=list)  # one Stats per repeat
    error: str | None = None

    @property
    def ran(self) -> bool:
        return self.error is None and bool(self.repeats)

    @property
    def ms(self) -> float:
        return float(np.median([s.median for s in self.repeats]))

    @property
    def min_ms(self) -> float:
        return min(s.min for s in self.repeats)

    @property
    def spread(self) -> float:
        """Within one series of runs, the worst repeat's (p90 - p10) / median."""
        return max(s.spread for s in self.repeats)

    @property
    def run_to_run(self) -> float:
        return run_to_run_spread([s.median for s in self.repeats])

    @property
    def runs(self) -> int:
        return sum(s.runs for s in self.repeats)

    @property
    def tflops(self) -> float | None:
        return self.flops / self.ms / 1e9 if self.flops else None

    @property
    def gbps(self) -> float:
        return self.bytes / self.ms / 1e6

    def speed_vs(self, other: "Measurement") -> float:
        """How fast this is relative to ``other``: the TFLOP/s ratio where both declare FLOPs,
        else the GB/s ratio."""
        if self.flops and other.flops:
            return self.tflops / other.tflops
        return self.gbps / other.gbps


@dataclass
class BenchReport:
    exercise: str
    shape: dict
    dtype: str
    causal: bool
    device: str
    check_passed: bool
    check_message: str | None = None
    kernel: Measurement | None = None
    baselines: list = field(default_factory=list)

    @property
    def baseline(self) -> Measurement | None:
        """The fastest baseline in the kernel's own precision."""
        ran = [b for b in self.baselines if b.role == "baseline" and b.ran]
        return min(ran, key=lambda b: b.ms) if ran else None

    @property
    def speed_of_light(self) -> Measurement | None:
        """For fp32 kernels: SDPA flash in fp16 (else the fastest fp16 SDPA that ran)."""
        ran = [b for b in self.baselines if b.role == "reference" and b.ran]
        flash = [b for b in ran if b.backend == SPEED_OF_LIGHT]
        return (flash or sorted(ran, key=lambda b: b.ms) or [None])[0]

    def describe_shape(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.shape.items()) + (" causal" if self.causal else "")

    def record(self) -> dict:
        """The evidence record (``benchmarks/results/gpu_evidence.json``, key ``bench``)."""
        if self.kernel is None:
            raise CourseError(f"{self.exercise} was not timed: {self.check_message}")
        k, b, sol = self.kernel, self.baseline, self.speed_of_light
        rec = {"kernel": self.exercise, "dtype": self.dtype, "d": self.shape.get("d"), "causal": self.causal,
               "B": self.shape.get("B"), "H": self.shape.get("H"), "S": self.shape.get("S"),
               "ms": _sig(k.ms), "tflops": _sig(k.tflops), "baseline": b.name if b else None,
               "baseline_tflops": _sig(b.tflops) if b else None, "ratio": _sig(k.speed_vs(b)) if b else None}
        rec |= {key: self.shape[key] for key in SHAPE_EXTRAS if key in self.shape}
        rec |= {"gbps": _sig(k.gbps), "spread": _sig(k.spread), "runs": k.runs, "min_ms": _sig(k.min_ms)}
        if len(k.repeats) > 1:
            rec |= {"repeat_ms": [_sig(s.median) for s in k.repeats], "run_to_run": _sig(k.run_to_run)}
        if b:
            rec |= {"baseline_backend": b.backend, "baseline_ms": _sig(b.ms)}
        if sol:
            rec |= {"sol_baseline": sol.name, "sol_tflops": _sig(sol.tflops), "sol_ratio": _sig(k.speed_vs(sol))}
        rec["device"] = self.device
        return rec

    def table(self) -> str:
        head = f"{self.exercise}  {self.dtype}  {self.describe_shape()}  on {self.device}"
        if not self.check_passed:
            return f"{head}\n  not timed: the kernel fails its check.\n  {self.check_message}"
        many = len(self.kernel.repeats) > 1
        cols = f"{'':44s}{'ms':>10s}{'min ms':>10s}{'spread':>8s}" + (f"{'r2r':>7s}" if many else "") + \
               f"{'runs':>6s}{'TFLOP/s':>9s}{'GB/s':>8s}{'yours/this':>11s}"
        lines = [head, cols]
        rows = [self.kernel] + sorted((b for b in self.baselines if b.ran), key=lambda b: (b.role != "baseline", b.ms))
        for m in rows:
            label = f"{m.name} (yours)" if m.role == "kernel" else m.name + (" [speed of light]" if m is self.speed_of_light else "")
            ratio = "" if m.role == "kernel" else f"{self.kernel.speed_vs(m):.3g}"
            tflops = f"{m.tflops:.3g}" if m.tflops else "-"
            lines.append(f"  {label:42s}{m.ms:10.4g}{m.min_ms:10.4g}{m.spread:8.1%}" + (f"{m.run_to_run:7.1%}" if many else "")
                         + f"{m.runs:6d}{tflops:>9s}{m.gbps:8.4g}{ratio:>11s}")
        for m in self.baselines:
            if not m.ran:
                lines.append(f"  {m.name}: did not run ({m.error})")
        return "\n".join(lines)


def _sig(x, digits=4):
    return None if x is None else float(f"{x:.{digits}g}")


# --------------------------------------------------------------------------- records


def record_key(rec: dict) -> tuple:
    return tuple(rec.get(k) for k in IDENTITY + SHAPE_EXTRAS)


def merge_records(path, records) -> dict:
    """Put ``records`` into the ``bench`` list of the JSON file at ``path`` (created if missing):
    a record with the same kernel, dtype, d, causal, B, H and S replaces the old one in place,
    new ones are appended, and every other key of the file is left as it was."""
    path = Path(path)
    text = path.read_text() if path.exists() else ""
    data = json.loads(text) if text.strip() else {}
    new = {record_key(r): r for r in records}
    merged = [new.pop(record_key(r), r) for r in data.get("bench", [])]
    data["bench"] = merged + list(new.values())
    path.write_text(json.dumps(data, indent=1) + ("\n" if text.endswith("\n") or not text else ""))
    return data


# --------------------------------------------------------------------------- baselines


@dataclass
class _Runner:
    measurement: Measurement
    fn: Callable | None = None
    stream: object = None
    context: Callable = contextlib.nullcontext
    before: Callable | None = None


def _torch():
    try:
        import torch
    except ImportError as exc:
        return None, f"PyTorch is not installed ({exc})"
    if not torch.cuda.is_available():
        return None, "PyTorch sees no CUDA device"
    return torch, None


def _torch_stream(torch):
    import cupy

    ptr = torch.cuda.current_stream().cuda_stream
    return cupy.cuda.ExternalStream(ptr) if ptr else cupy.cuda.Stream.null


def _sdpa_runners(spec, p, dtype, seed) -> list:
    """SDPA under each named backend: in the kernel's precision, and for fp32 kernels also
    in fp16 (the speed-of-light reference). A backend that refuses is listed with its reason."""
    backward = spec.baseline == "sdpa_bwd"
    flops = SDPA_BWD_FLOPS(p) if backward else spec.flops(p)
    what = "SDPA backward" if backward else "SDPA"
    plans = [(dtype, "baseline")] + ([("fp16", "reference")] if dtype == "fp32" else [])
    torch, why = _torch()
    if torch is None:
        return [_Runner(Measurement(f"torch {what} {dt}", dt, role, flops, 0.0, error=why)) for dt, role in plans]
    from torch.nn.attention import SDPBackend, sdpa_kernel

    F = torch.nn.functional
    runners = []
    for dt, role in plans:
        gen = torch.Generator(device="cuda").manual_seed(seed)
        tdtype = getattr(torch, DTYPES[dt])
        q, k, v = (torch.randn(p.B, p.H, p.N, p.d, device="cuda", dtype=tdtype, generator=gen) for _ in range(3))
        nbytes = SDPA_BWD_BYTES(p, ITEMSIZE[dt]) if backward else spec.bytes(p, ITEMSIZE[dt])
        names = ["FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION"]
        if role == "baseline":
            names.append("MATH")  # only timed when no fused backend takes this precision
        found = []
        for name in names:
            m = Measurement(f"torch {what} {dt} {name}", dt, role, flops, nbytes, backend=name)
            if name == "MATH" and any(r.measurement.error is None for r in found):
                continue
            chosen = getattr(SDPBackend, name, None)
            if chosen is None:
                m.error = f"this PyTorch has no SDPBackend.{name}"
                found.append(_Runner(m))
                continue
            try:
                with warnings.catch_warnings(record=True) as caught, sdpa_kernel(chosen):
                    warnings.simplefilter("always")
                    fn = _sdpa_call(torch, F, q, k, v, spec.causal, backward, gen)
                    fn()
                    torch.cuda.synchronize()
            except RuntimeError as exc:
                m.error = _why_refused([str(w.message) for w in caught] + [str(exc)])
                found.append(_Runner(m))
                continue
            found.append(_Runner(m, fn, _torch_stream(torch), lambda b=chosen: sdpa_kernel(b)))
        runners += found
    return runners


def _why_refused(messages) -> str:
    """PyTorch explains a refused backend in warnings about every backend; keep the reasons,
    not the source locations or the notes that the other backends were switched off."""
    reasons = []
    for message in messages:
        text = re.sub(r"\s*\(Triggered internally at [^)]*\)", "", message).strip()
        if text and not text.endswith("because:") and "runtime disabled" not in text:
            reasons.append(text.splitlines()[0])
    return "; ".join(dict.fromkeys(reasons))


def _sdpa_call(torch, F, q, k, v, causal, backward, gen):
    if not backward:
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # the backend is chosen here
    grad = torch.randn(out.shape, device=out.device, dtype=out.dtype, generator=gen)
    return lambda: torch.autograd.grad(out, (q, k, v), grad, retain_graph=True)


def _baseline_runners(spec, p, dtype, inputs, seed) -> list:
    import cupy

    if spec.baseline in ("sdpa", "sdpa_bwd"):
        return _sdpa_runners(spec, p, dtype, seed)
    if spec.baseline == "cublas":
        m = Measurement(f"cuBLAS {dtype} (cupy.matmul)", dtype, "baseline", spec.flops(p), spec.bytes(p, ITEMSIZE[dtype]),
                        backend="cublas")
        if dtype == "bf16":
            m.error = "CuPy has no bfloat16 matmul"
            return [_Runner(m)]
        a, b = (inputs["A"], inputs["B"]) if spec.family == "matmul" else (inputs["Q"], inputs["K"].T)
        out = cupy.empty((a.shape[0], b.shape[1]), dtype=a.dtype)
        return [_Runner(m, lambda: cupy.matmul(a, b, out=out), cupy.cuda.get_current_stream())]
    if spec.baseline == "softmax":
        m = Measurement(f"torch.softmax {dtype}", dtype, "baseline", None, spec.bytes(p, ITEMSIZE[dtype]), backend="torch")
        torch, why = _torch()
        if torch is None or dtype == "bf16":
            m.error = why or "the bf16 inputs are raw bits here"
            return [_Runner(m)]
        x = torch.from_dlpack(inputs["x"])
        return [_Runner(m, lambda: torch.softmax(x, dim=-1), _torch_stream(torch))]
    return []


# --------------------------------------------------------------------------- bench


def _kernel_dtype(source: str, kernel: str) -> str:
    """The precision of the kernel's tensors: its first floating-point pointer parameter."""
    from .signature import parse_signature

    names = {v: k for k, v in DTYPES.items()}
    for param in parse_signature(source, kernel).params:
        if param.pointer and param.dtype in names:
            return names[param.dtype]
    return "fp32"


def _device_name() -> str:
    import cupy

    return cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["name"].decode()


def bench(exercise: str, kernel, *, shape=None, dtype: str | None = None, repeats: int = 1,
          budget: Budget | None = None, baselines: bool = True, seed: int = 0) -> BenchReport:
    """Check ``kernel`` (its source, or the kernel ``%%cuda`` made) on the exercise's visible
    cases, then time it at ``shape`` (a dict, or ``"B=4,S=2048"``; unnamed entries keep the
    exercise's benchmark defaults) next to its baselines. ``repeats`` repeats the whole
    measurement (warm-up included), kernel and baselines in turn, to show run-to-run spread."""
    from .checks import get_exercise, run_check
    from .kernel import RawKernel

    if active_backend() != "gpu":
        raise BackendUnavailableError(REFUSAL.format(exercise=exercise))
    import cupy

    ex, spec = get_exercise(exercise), get_spec(exercise)
    source = kernel if isinstance(kernel, str) else getattr(kernel, "code", None)
    if not isinstance(source, str):
        raise CourseError("bench(exercise, kernel): pass the kernel's source string or the kernel made by %%cuda")
    shape = parse_shape(shape, spec)
    own = _kernel_dtype(source, ex.kernel)
    dtype = dtype or own
    if dtype not in DTYPES:
        raise CourseError(f"dtype {dtype!r}: choose one of {', '.join(DTYPES)}")
    if dtype != own:
        raise CourseError(f"{ex.kernel} takes {own} tensors (its signature), so it can only be benchmarked with --dtype {own}")
    if why := spec.unsupported(shape):
        raise CourseError(why)
    report = BenchReport(exercise, shape, dtype, spec.causal, _device_name(), check_passed=False)

    result = run_check(exercise, source, backend="gpu")
    if not result.passed:
        report.check_message = result.first_failure.message
        return report
    report.check_passed = True

    p = spec.params(shape)
    compiled = RawKernel(source, ex.kernel, options=ex.options).compile()
    inputs = device_inputs(spec, p, dtype, seed)
    arrays = dict(inputs)
    for name, spec_of in (ex.outputs | ex.scratch).items():
        out_shape, out_dtype = spec_of(p)
        arrays[name] = cupy.empty(out_shape, out_dtype)
    args, grid, block, smem = ex.args(p, SimpleNamespace(**arrays)), ex.grid(p), ex.block(p), ex.shared_mem(p)
    compiled.max_dynamic_shared_size_bytes = max(compiled.max_dynamic_shared_size_bytes, smem)
    zeroed = [arrays[name] for name in ex.zeroed]

    mine = Measurement(exercise, dtype, "kernel", spec.flops(p) if spec.flops else None, spec.bytes(p, ITEMSIZE[dtype]))
    runners = [_Runner(mine, lambda: compiled(grid, block, args, shared_mem=smem), cupy.cuda.get_current_stream(),
                       before=(lambda: [z.fill(0) for z in zeroed]) if zeroed else None)]
    if baselines:
        runners += _baseline_runners(spec, p, dtype, inputs, seed)
    timer, budget = EventTimer(), budget or Budget()
    try:
        for _ in range(repeats):
            for r in runners:
                if r.fn is not None:
                    with r.context():
                        r.measurement.repeats.append(budget.measure(timer, r.fn, r.stream, r.before))
    finally:
        cupy.cuda.Device().synchronize()
    report.kernel = mine
    report.baselines = [r.measurement for r in runners[1:]]
    return report

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

The CPU emulator does not model speed, so on it :func:`bench` refuses, except for a dry run
(``dry_run=True``: everything but the timing, a rehearsal of a GPU run at a small shape).
"""
from __future__ import annotations

import ast
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

from .arrays import empty, never_written
from .backend import backend as active_backend
from .benchspec import DTYPES, ITEMSIZE, SDPA_BWD_BYTES, SDPA_BWD_FLOPS, device_inputs, get_spec, parse_shape
from .checks import get_exercise, refuse_unsupported, run_check
from .errors import BackendUnavailableError, CourseError
from .judge import dtype_name
from .kernel import RawKernel
from .signature import C_TYPES, QUALIFIERS, parse_signature, strip_comments

REFUSAL = ("the CPU emulator does not model a GPU's speed, so it cannot benchmark a kernel: "
           "to see the memory traffic your kernel makes, run python -m grader profile {exercise} file.cu")

TRITON_REFUSAL = ("grader bench times CUDA kernels; a Triton cell is timed on a GPU by the look-at-it cell of "
                  "module 12's notebook, or beside SDPA and cuDNN by `python benchmarks/bench_12_triton.py "
                  "--source-dir DIR` (DIR holding softmax.py, flash_forward.py, ... named after the launchers)")

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


def in_turn(items: list, repeats: int):
    """``items`` ``repeats`` times over, every other pass in reverse order (a b c, c b a, a b c, ...):
    timed in this order, no item always follows the same one and none always goes first."""
    for i in range(repeats):
        yield from items if i % 2 == 0 else items[::-1]


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
    """How long to measure: see :func:`sample`. Warm-up runs are discarded; they last long enough
    for the clocks to settle at the timed kernel's own power draw, not the one before it (a GPU
    at its power limit moves its clock within a few hundred milliseconds of a new load)."""

    min_runs: int = 10
    min_ms: float = 200.0
    max_ms: float = 5000.0
    max_runs: int = 10000
    warmup_runs: int = 2
    warmup_ms: float = 300.0

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

    def record(self, against: str | None = None) -> dict:
        """The evidence record (``benchmarks/results/gpu_evidence.json``, key ``bench``). Its
        baseline and ratio are the fastest baseline's, or with ``against`` (an SDPA backend such as
        ``"FLASH_ATTENTION"``) that backend's in the kernel's precision."""
        if self.kernel is None:
            raise CourseError(f"{self.exercise} was not timed: {self.check_message}")
        k, b, sol = self.kernel, self.baseline, self.speed_of_light
        if against is not None:
            b = next((m for m in self.baselines if m.role == "baseline" and m.backend == against and m.ran), None)
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
        if self.kernel is None:
            return f"{head}\n  dry run: checked, and launched once at this shape; not timed."
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


_DIRECTIVE = re.compile(r"\s*#\s*(\w+)\s*(.*)")
_DEFINE = re.compile(r"(\w+)(\([^)]*\))?\s*(.*)")  # NAME, (params) of a function-like macro, value
_ALIAS = re.compile(r"\btypedef\s+([A-Za-z_][\w\s:]*?)\s+([A-Za-z_]\w*)\s*;"
                    r"|\busing\s+([A-Za-z_]\w*)\s*=\s*([A-Za-z_][\w\s:]*?)\s*;")
# What a constant #if expression may hold once its names are replaced by numbers.
_PP_NODES = (ast.Expression, ast.BoolOp, ast.BinOp, ast.UnaryOp, ast.Compare, ast.Constant, ast.And, ast.Or,
             ast.Not, ast.USub, ast.UAdd, ast.Invert, ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod, ast.LShift,
             ast.RShift, ast.BitAnd, ast.BitOr, ast.BitXor, ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE)


class _Unreadable(Exception):
    """A preprocessor condition this reader does not evaluate (function-like macros, ?:, ...)."""


def _pp_condition(expr: str, macros: dict) -> bool:
    """The value of an ``#if``/``#elif`` expression under ``macros`` (name -> object-like value,
    or None for a function-like macro), as the C preprocessor computes it."""
    expr = re.sub(r"\bdefined\s*(?:\(\s*(\w+)\s*\)|(\w+))", lambda m: f" {int((m[1] or m[2]) in macros)} ", expr)
    for _ in range(32):  # expand object-like macros until none is left
        expanded = re.sub(r"\b[A-Za-z_]\w*\b", lambda m: f"({macros[m[0]]})" if macros.get(m[0]) is not None else m[0],
                          expr)
        if expanded == expr:
            break
        expr = expanded
    if re.search(r"\b[A-Za-z_]\w*\s*\(", expr):
        raise _Unreadable(expr)
    expr = re.sub(r"\b[A-Za-z_]\w*\b", "0", expr)  # a name left undefined counts as 0
    expr = re.sub(r"\b(0[xX][0-9a-fA-F]+|\d+)[uUlL]*\b", r"\1", expr)
    expr = re.sub(r"!(?!=)", " not ", expr.replace("&&", " and ").replace("||", " or ")).replace("/", "//")
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError:
        raise _Unreadable(expr) from None
    if not all(isinstance(node, _PP_NODES) for node in ast.walk(tree)):
        raise _Unreadable(expr)
    return bool(eval(compile(tree, "#if", "eval"), {"__builtins__": {}}))


def _preprocessed(source: str, options=()) -> tuple[str, dict]:
    """(text, macros): ``source`` with comments blanked and the lines of the ``#if`` branches that
    the ``-D``/``-U`` options leave out removed, and the object-like macros defined by its end."""

    macros = {}
    for opt in options:
        if opt.startswith("-D"):
            name, eq, value = opt[2:].partition("=")
            macros[name] = value if eq else "1"
        elif opt.startswith("-U"):
            macros.pop(opt[2:], None)
    kept, branches = [], []  # per open #if: [this branch is active, a branch was taken]
    for line in strip_comments(source).replace("\\\n", " ").split("\n"):
        directive = _DIRECTIVE.fullmatch(line)
        active = all(b[0] for b in branches)
        if directive is None:
            if active:
                kept.append(line)
            continue
        word, rest = directive.groups()
        if word in ("if", "ifdef", "ifndef"):
            if not active:
                on = False
            elif word == "if":
                on = _pp_condition(rest, macros)
            else:
                on = (rest.split()[0] in macros) == (word == "ifdef")
            branches.append([on, on or not active])
        elif word in ("elif", "else") and branches:
            b = branches[-1]
            b[0] = not b[1] and (word == "else" or _pp_condition(rest, macros))
            b[1] = b[1] or b[0]
        elif word == "endif" and branches:
            branches.pop()
        elif active and word == "define" and (d := _DEFINE.fullmatch(rest)):
            macros[d[1]] = None if d[2] else d[3].strip()
        elif active and word == "undef" and rest.split():
            macros.pop(rest.split()[0], None)
    return "\n".join(kept), macros


def _resolve_type(ctype: str, text: str, macros: dict) -> str | None:
    """The NumPy name of ``ctype`` followed through object-like macros and the typedefs and
    ``using`` aliases of ``text`` (None where one is missing, ambiguous or not a plain C type)."""

    aliases: dict = {}
    for m in _ALIAS.finditer(text):
        name, target = (m[2], m[1]) if m[2] else (m[3], m[4])
        aliases.setdefault(name, set()).add(" ".join(t for t in target.split() if t not in QUALIFIERS))
    seen = set()
    while ctype not in C_TYPES:
        if ctype in seen:
            return None
        seen.add(ctype)
        if macros.get(ctype):
            ctype = " ".join(t for t in macros[ctype].split() if t not in QUALIFIERS)
        elif len(aliases.get(ctype, ())) == 1:
            ctype = next(iter(aliases[ctype]))
        else:
            return None
    return C_TYPES[ctype]


def source_dtype(source: str, kernel: str, options=()) -> str | None:
    """The precision of the kernel's tensors as compiled with ``options``: the type of its first
    floating-point pointer parameter, followed through the typedefs, ``using`` aliases and macros
    that the options select (``typedef __nv_bfloat16 elem;`` under ``#if ELEM_BF16``), in the
    source with its comments blanked. None when the source does not say (a pointer parameter whose
    type this reader cannot follow comes first)."""

    try:
        text, macros = _preprocessed(source, options)
        params = parse_signature(text, kernel).params
    except (_Unreadable, CourseError):
        return None
    names = {v: k for k, v in DTYPES.items()}
    for param in params:
        if not param.pointer:
            continue
        dtype = param.dtype or _resolve_type(param.ctype, text, macros)
        if dtype is None:
            return None
        if dtype in names:
            return names[dtype]
    return "fp32"


def kernel_dtype(source: str, ex, asked: str | None = None, doing: str = "benchmarked") -> str:
    """The precision of the kernel's tensors built as the exercise row ``ex`` builds it
    (:func:`source_dtype` under ``ex.options``), or, where the source does not say, the row's
    first output. ``asked`` (a dtype asked for) must be it."""

    names = {v: k for k, v in DTYPES.items()}
    own = source_dtype(source, ex.kernel, ex.options)
    if own is None:
        p = SimpleNamespace(**ex.visible_cases()[0].params)
        own = names.get(dtype_name(ex, next(iter(ex.outputs)), p), "fp32")
    if asked is not None and asked not in DTYPES:
        raise CourseError(f"dtype {asked!r}: choose one of {', '.join(DTYPES)}")
    if asked is not None and asked != own:
        built = f" built with {' '.join(ex.options)}" if ex.options else ""
        raise CourseError(f"{ex.kernel}{built} takes {own} tensors (its signature), so it can only be {doing} with "
                          f"--dtype {own}")
    return own


def device_name() -> str:
    import cupy

    return cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["name"].decode()


def _launch(ex, compiled, spec, p, dtype: str, seed: int):
    """(launch, inputs, arrays): ``compiled`` launched by ``launch()`` on fresh inputs of parameters
    ``p`` and poisoned outputs (``grader.empty``: an element no thread writes stays recognisable)."""
    inputs = device_inputs(spec, p, dtype, seed)
    arrays = dict(inputs)
    for name, spec_of in (ex.outputs | ex.scratch).items():
        arrays[name] = empty(*spec_of(p))
    args, grid, block, smem = ex.args(p, SimpleNamespace(**arrays)), ex.grid(p), ex.block(p), ex.shared_mem(p)
    compiled.max_dynamic_shared_size_bytes = max(compiled.max_dynamic_shared_size_bytes, smem)
    return (lambda: compiled(grid, block, args, shared_mem=smem)), inputs, arrays


def kernel_runner(ex, compiled, spec, p, dtype: str, seed: int = 0) -> tuple[_Runner, dict]:
    """``compiled`` (a compiled RawKernel of the exercise row ``ex``, or of a variant of it such as
    the autotuner's) launched on fresh device inputs of parameters ``p``, ready to time; and the
    inputs, for the baselines."""
    import cupy

    launch, inputs, arrays = _launch(ex, compiled, spec, p, dtype, seed)
    zeroed = [arrays[name] for name in ex.zeroed]
    mine = Measurement(ex.id, dtype, "kernel", spec.flops(p) if spec.flops else None, spec.bytes(p, ITEMSIZE[dtype]))
    runner = _Runner(mine, launch, cupy.cuda.get_current_stream(),
                     before=(lambda: [z.fill(0) for z in zeroed]) if zeroed else None)
    return runner, inputs


def _dry_run(ex, compiled, spec, p, dtype: str, seed: int) -> str | None:
    """One launch at the benchmark's parameters: None, or which outputs it left unwritten."""
    launch, _, arrays = _launch(ex, compiled, spec, p, dtype, seed)
    for name in ex.zeroed:
        arrays[name][...] = 0
    launch()
    missing = []
    for name, spec_of in ex.outputs.items():
        if n := int(never_written(arrays[name], spec_of(p)[1]).sum()):
            missing.append(f"{n} of {arrays[name].size} elements of {name}")
    return f"dry run: the launch left {', '.join(missing)} unwritten" if missing else None


def time_in_turn(runners: list, repeats: int, budget: Budget | None = None, timer: EventTimer | None = None) -> None:
    """Each runner measured ``repeats`` times (into its measurement's ``repeats``), the runners in
    turn (:func:`in_turn`); a runner without a function (a baseline that cannot run) is skipped."""
    import cupy

    timer, budget = timer or EventTimer(), budget or Budget()
    try:
        for r in in_turn(runners, repeats):
            if r.fn is not None:
                with r.context():
                    r.measurement.repeats.append(budget.measure(timer, r.fn, r.stream, r.before))
    finally:
        cupy.cuda.Device().synchronize()


def race(builds: list, repeats: int, budget: Budget | None = None, seed: int = 0,
         timer: EventTimer | None = None) -> list[list[float]]:
    """Builds of one exercise timed against each other: each ``(ex, compiled, p, dtype)`` launched as
    its row ``ex`` says at parameters ``p``, all of them measured ``repeats`` times in turn. Per build,
    the median ms of each measurement. Timed one after another instead, close builds trade places
    from run to run (the clock a kernel gets depends on what ran before it)."""

    runners = [kernel_runner(ex, compiled, get_spec(ex.id), p, dtype, seed)[0] for ex, compiled, p, dtype in builds]
    time_in_turn(runners, repeats, budget, timer)
    return [[s.median for s in r.measurement.repeats] for r in runners]


def kernel_source(kernel, caller: str) -> str:
    """The source of ``kernel``: a source string, or the kernel ``%%cuda`` made."""
    source = kernel if isinstance(kernel, str) else getattr(kernel, "code", None)
    if not isinstance(source, str):
        raise CourseError(f"{caller}: pass the kernel's source string or the kernel made by %%cuda")
    return source


def bench(exercise: str, kernel, *, shape=None, dtype: str | None = None, repeats: int = 1,
          budget: Budget | None = None, baselines: bool = True, seed: int = 0, dry_run: bool = False) -> BenchReport:
    """Check ``kernel`` (its source, or the kernel ``%%cuda`` made) on the exercise's visible
    cases, then time it at ``shape`` (a dict, or ``"B=4,S=2048"``; unnamed entries keep the
    exercise's benchmark defaults) next to its baselines. ``repeats`` repeats the whole
    measurement (warm-up included), kernel and baselines in turn, every other repeat in reverse
    order, to show run-to-run spread: no runner always follows the same one, and none always
    starts a repeat (a GPU at its power limit runs a kernel at a clock that the one before it
    left: section 9 of module 11's reading).

    ``dry_run=True`` does all of it but the timing, on either backend (the emulator too): the
    check, then one launch at ``shape`` whose outputs must all be written; the report holds no
    times. A script rehearses a GPU run that way, at a small shape."""

    be = active_backend()
    if getattr(get_exercise(exercise), "kind", "cuda") == "triton":
        raise CourseError(TRITON_REFUSAL)
    if be != "gpu" and not dry_run:
        raise BackendUnavailableError(REFUSAL.format(exercise=exercise))

    ex, spec = get_exercise(exercise), get_spec(exercise)
    refuse_unsupported(ex, be)
    source = kernel_source(kernel, "bench(exercise, kernel)")
    shape = parse_shape(shape, spec)
    dtype = kernel_dtype(source, ex, dtype)
    if why := spec.unsupported(shape):
        raise CourseError(why)
    report = BenchReport(exercise, shape, dtype, spec.causal, device_name() if be == "gpu" else "the CPU emulator",
                         check_passed=False)

    result = run_check(exercise, source, backend=be)
    if not result.passed:
        report.check_message = result.first_failure.message
        return report
    report.check_passed = True

    p = spec.params(shape)
    compiled = RawKernel(source, ex.kernel, options=ex.options).compile()
    if dry_run:
        report.check_message = _dry_run(ex, compiled, spec, p, dtype, seed)
        report.check_passed = report.check_message is None
        return report
    mine, inputs = kernel_runner(ex, compiled, spec, p, dtype, seed)
    runners = [mine]
    if baselines:
        runners += _baseline_runners(spec, p, dtype, inputs, seed)
    time_in_turn(runners, repeats, budget)
    report.kernel = mine.measurement
    report.baselines = [r.measurement for r in runners[1:]]
    return report

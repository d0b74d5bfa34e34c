"""Autotuning: compile a kernel once per configuration of its compile-time macros, keep the fastest.

    space = autotune.register_space(autotune.Space(
        exercise="tc_flash_fwd_swizzle_d64", params={"BLOCK_ROWS": (64, 128), "STAGES": (2, 3, 4)},
        grid=lambda p, cfg: (ceil_div(p.N, cfg["BLOCK_ROWS"]), p.H, p.B),
        block=lambda p, cfg: 2 * cfg["BLOCK_ROWS"],
        shared_mem=lambda p, cfg: ...))
    print(autotune.tune("tc_flash_fwd_swizzle_d64", code).table())

A configuration is one value per macro, passed as ``-DNAME=value`` in place of any same-named
option of the exercise. Each one is, in order:

1. skipped when the space's ``exclude`` gives a reason;
2. rejected when its launch is over the device's limits at any shape it would run at (the
   exercise's visible cases and the benchmark shape): 1024 threads per block, and the dynamic
   shared memory a block may opt in to (the device's attribute on a GPU, an H100's 227 KB on the
   emulator);
3. compiled, and rejected when it does not compile, or (on a GPU) when its block has more threads
   than the build's registers per thread allow (the compiled kernel's own limit);
4. judged by the exercise's own check (visible cases) on a copy of the exercise row whose launch
   shape comes from the space, and rejected when a case fails;
5. timed at the benchmark shape (``grader.benchspec``) by the benchmark harness's timing of the
   kernel alone (``grader.benchmark``: CUDA events, L2 flushed before each run);
6. if among the ``FINALISTS`` fastest within ``FINAL_MARGIN`` of the fastest, timed again against
   the other finalists, in turn (``grader.benchmark.race``: ``FINAL_ROUNDS`` measurements each,
   every other round in reverse order); the median of its rounds is then its time, and the best
   is the fastest finalist. One measurement each ranks builds a few percent apart differently from
   run to run: a GPU at its power limit clocks a kernel by what ran before it.

The emulator does not model speed, so there steps 5 and 6 are skipped and no configuration is
chosen, unless a ``timer`` is passed (tests pass one to make tuning deterministic; step 6 runs when
the timer has a ``race`` method, as the GPU's has). The fastest
configuration is cached per (device, exercise, shape, dtype, build) in ``autotune.json`` under
the grader's cache directory (``GRADER_CACHE_DIR``), where "build" hashes the kernel source, the
exercise's options and the search space; a hit compiles nothing.
"""
from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

from .backend import backend as active_backend
from .benchmark import REFUSAL, Budget, EventTimer, device_name, kernel_dtype, race
from .benchspec import SPECS, get_spec, parse_shape
from .checks import get_exercise, refuse_unsupported, run_check, source_of
from .device import H100_SXM
from .errors import CourseError, LaunchConfigError
from .exercise_rows import SPACES, Space, register_space  # noqa: F401  (the spaces are declared with the rows)
from .kernel import RawKernel
from .launch import check_launch

CACHE_VERSION = 2  # 2: the finalists raced (step 6)
FINALISTS = 4
FINAL_MARGIN = 0.05
FINAL_ROUNDS = 4
EMULATOR = "CPU emulator"


def configurations(space: Space) -> list[dict]:
    """Every combination of the space's values: the last macro varies fastest."""
    names = list(space.params)
    return [dict(zip(names, values)) for values in itertools.product(*space.params.values())]


def options_for(options: tuple, cfg: dict) -> tuple:
    """``options`` with each ``-DNAME=...`` of a macro in ``cfg`` dropped, then ``cfg``'s macros."""
    def macro(opt):
        return opt[2:].split("=", 1)[0].strip() if opt.startswith("-D") else None

    return tuple(o for o in options if macro(o) not in cfg) + tuple(f"-D{k}={v}" for k, v in cfg.items())


# --------------------------------------------------------------------------- results


@dataclass
class Row:
    """One configuration: ``status`` is "ok" or why it was rejected; ``ms`` and ``tflops`` when timed."""

    cfg: dict
    status: str
    ms: float | None = None
    tflops: float | None = None
    rounds: list | None = None  # a finalist's ms in each round of the race (``ms`` is their median)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass
class TuneResult:
    """What :func:`tune` found: a row per configuration, in the order of :func:`configurations`."""

    exercise: str
    device: str
    shape: dict
    dtype: str
    options: tuple  # the exercise's own options, before a configuration's macros
    rows: list = field(default_factory=list)
    note: str | None = None  # why nothing was timed
    cached: bool = False

    @property
    def best(self) -> dict | None:
        """The configuration of the fastest row that passed (of the finalists, when they were raced), or
        None when none was timed."""
        timed = [r for r in self.rows if r.ok and r.ms is not None]
        return min([r for r in timed if r.rounds] or timed, key=lambda r: r.ms).cfg if timed else None

    @property
    def best_options(self) -> tuple | None:
        """The compile options of the best configuration: the exercise's, with its macros."""
        return None if self.best is None else options_for(self.options, self.best)

    def records(self) -> list[dict]:
        """One flat dict per configuration (for a JSON file or a plot)."""
        return [{"kernel": self.exercise, "dtype": self.dtype, **self.shape, **r.cfg, "status": r.status,
                 "ms": r.ms, "tflops": r.tflops, "device": self.device} | ({"rounds": r.rounds} if r.rounds else {})
                for r in self.rows]

    def table(self) -> str:
        shape = " ".join(f"{k}={v}" for k, v in self.shape.items())
        head = "  ".join(filter(None, [f"tune {self.exercise}", self.dtype, shape, f"on {self.device}"]))
        if self.cached:
            head += "  (cached: tuned earlier; refresh=True or --refresh tunes again)"
        names = list(self.rows[0].cfg) if self.rows else []
        widths = [max(len(n), *(len(str(r.cfg[n])) for r in self.rows)) + 2 for n in names]
        lines = [head, "  " + "".join(f"{n:<{w}}" for n, w in zip(names, widths)) + f"{'ms':>10s}{'TFLOP/s':>9s}  status"]
        best = self.best
        for r in self.rows:
            ms = f"{r.ms:.4g}" if r.ms is not None else "-"
            tflops = f"{r.tflops:.3g}" if r.tflops is not None else "-"
            mark = ("  <- best" if r.cfg == best else "") + (f"  (raced: median of {len(r.rounds)})" if r.rounds else "")
            lines.append("  " + "".join(f"{str(r.cfg[n]):<{w}}" for n, w in zip(names, widths))
                         + f"{ms:>10s}{tflops:>9s}  {r.status}{mark}")
        if best is not None:
            lines.append("best: " + " ".join(f"{k}={v}" for k, v in best.items()))
            lines.append("compile with: " + " ".join(self.best_options))
        else:
            lines.append("no best configuration: " + (self.note or "none passed (each row says why)"))
        return "\n".join(lines)


# --------------------------------------------------------------------------- the cache


def cache_path() -> Path:
    """``autotune.json`` in the grader's cache directory (``GRADER_CACHE_DIR``, else ~/.cache/flash-course)."""
    root = os.environ.get("GRADER_CACHE_DIR")
    return (Path(root) if root else Path.home() / ".cache" / "flash-course") / "autotune.json"


def _read_cache(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):  # none yet, or left half-written: tuning again rebuilds it
        return {}
    return data.get("entries", {}) if data.get("version") == CACHE_VERSION else {}


def _write_cache(path: Path, key: str, entry: dict) -> None:
    entries = _read_cache(path)
    entries[key] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps({"version": CACHE_VERSION, "entries": entries}, indent=1) + "\n")
    os.replace(tmp, path)


def _build_hash(source: str, options: tuple, space: Space) -> str:
    text = json.dumps([source, list(options), {k: list(v) for k, v in space.params.items()}], default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# --------------------------------------------------------------------------- timing


def gpu_timer(budget=None, seed: int = 0) -> Callable:
    """The default timer on a GPU: ``timer(ex, kernel, p, dtype) -> ms``, the median time of the
    compiled ``kernel`` launched as the exercise row ``ex`` says at parameters ``p``, measured by
    the benchmark harness (``budget``: a ``benchmark.Budget``) without baselines."""

    budget = budget or Budget()
    events = []  # one L2-flushing timer (its buffer is twice the L2) for every configuration

    def timer(ex, kernel, p, dtype):
        if not events:
            events.append(EventTimer())
        return race([(ex, kernel, p, dtype)], 1, budget, seed, events[0])[0][0]

    timer.race = lambda builds: race(builds, FINAL_ROUNDS, budget, seed, events[0])
    return timer


def _max_shared_bytes(be: str) -> int:
    if be != "gpu":
        return H100_SXM.max_shared_per_block_optin
    import cupy

    return int(cupy.cuda.Device().attributes["MaxSharedMemoryPerBlockOptin"])


# --------------------------------------------------------------------------- tuning


def _source(kernel) -> str:
    """What check and bench accept (source text, or a kernel made by %%cuda), or a file path."""

    if isinstance(kernel, Path):
        return kernel.read_text()
    if isinstance(kernel, str) and "\n" not in kernel and kernel.endswith((".cu", ".cuh")) and Path(kernel).is_file():
        return Path(kernel).read_text()
    return source_of(kernel)


def variant(ex, space: Space, cfg: dict):
    """A copy of the exercise row ``ex`` built and launched with configuration ``cfg`` (not registered)."""
    fields = space.row_fields(cfg) if space.row_fields is not None else {}
    return dataclasses.replace(ex, grid=lambda p: space.grid(p, cfg), block=lambda p: space.block(p, cfg),
                               shared_mem=lambda p: space.shared_mem(p, cfg), options=options_for(ex.options, cfg),
                               **fields)


def _over_limits(ex, points, max_shared: int) -> str | None:
    for p in points:
        try:
            check_launch(ex.kernel, ex.grid(p), ex.block(p), 0, 0)
        except LaunchConfigError as err:
            return str(err).removeprefix(f"{ex.kernel}: ").split(". ")[0]
        smem = ex.shared_mem(p)
        if smem > max_shared:
            return f"{smem} bytes of dynamic shared memory per block, over the {max_shared} this device allows"
    return None


def _threads(ex, p) -> int:
    b = check_launch(ex.kernel, ex.grid(p), ex.block(p), 0, 0)[1]
    return b[0] * b[1] * b[2]


def _first_line(message: str) -> str:
    return message.strip().splitlines()[0].strip()


def _final(timed: list, p, dtype, timer, flops) -> None:
    """Step 6: the finalists among ``timed`` ((row, its exercise row, its compiled build) of every timed
    configuration) raced, their rows' ``ms`` and ``rounds`` set from the race."""
    timed = sorted(timed, key=lambda t: t[0].ms)
    finalists = [t for t in timed[:FINALISTS] if t[0].ms <= timed[0][0].ms * (1 + FINAL_MARGIN)] if timed else []
    if len(finalists) < 2:
        return
    rounds = timer.race([(v, compiled, p, dtype) for _, v, compiled in finalists])
    for (r, _, _), ms in zip(finalists, rounds):
        r.rounds = [float(x) for x in ms]
        r.ms = statistics.median(r.rounds)
        r.tflops = flops / r.ms / 1e9 if flops else None


def _try(ex, space, cfg, source, points, p, dtype, be, timer, flops, max_shared, timed: list) -> Row:
    """Steps 1-5 for one configuration; a timed one is added to ``timed`` with its exercise row and build."""

    why = space.exclude(cfg) if space.exclude is not None else None
    if why:
        return Row(cfg, f"excluded: {why}")
    v = variant(ex, space, cfg)
    why = _over_limits(v, points, max_shared)
    if why:
        return Row(cfg, f"over the limit: {why}")
    try:
        compiled = RawKernel(source, ex.kernel, options=v.options, backend=be).compile()
    except CourseError as err:
        lines = str(err).strip().splitlines()  # a header naming the compiler, then the diagnostics
        return Row(cfg, "compile error: " + (lines[1] if len(lines) > 1 else lines[0]).strip())
    if (limit := compiled.max_threads_per_block()) is not None:
        threads = max(_threads(v, q) for q in points)
        if threads > limit:
            return Row(cfg, f"over the limit: {threads} threads per block, where this build's registers allow {limit}")
    result = run_check(v, source, backend=be, seed=0)
    if not result.passed:
        return Row(cfg, "check failed: " + _first_line(result.first_failure.message))
    if timer is None:
        return Row(cfg, "ok")
    try:
        ms = float(timer(v, compiled, p, dtype))
    except CourseError as err:
        return Row(cfg, "timing failed: " + _first_line(str(err)))
    row = Row(cfg, "ok", ms, flops / ms / 1e9 if flops else None)
    timed.append((row, v, compiled))
    return row


def tune(exercise_id: str, kernel, *, shape: dict | str | None = None, dtype: str | None = None,
         timer: Callable | None = None, cache: bool = True, refresh: bool = False,
         progress: Callable | None = None) -> TuneResult:
    """Try every configuration of the exercise's registered space on ``kernel`` (see the module
    docstring) and return one row per configuration and the fastest. ``shape`` (a dict, or
    ``"B=4,S=2048"``) is the benchmark shape, unnamed entries keeping the exercise's defaults;
    ``dtype`` defaults to the kernel's own. ``timer(ex, kernel, p, dtype) -> ms`` replaces the
    GPU timing (:func:`gpu_timer`); without one the emulator only checks. ``cache``: return a
    stored result for the same device, exercise, shape, dtype and build instead of tuning, and
    store a new one; ``refresh``: tune even when one is stored. ``progress(done, total, row)`` is
    called after each configuration (the command line prints a line: a space is minutes of checks)."""

    ex = get_exercise(exercise_id)  # (also registers every module's exercises and their spaces)
    space = SPACES.get(exercise_id)
    if space is None:
        known = ", ".join(sorted(SPACES)) or "none"
        raise CourseError(f"no autotuning space is registered for {exercise_id!r}. Spaces exist for: {known}")
    source = _source(kernel)
    spec = SPECS.get(exercise_id)
    if spec is not None:
        shape = parse_shape(shape, spec)
        if why := spec.unsupported(shape):
            raise CourseError(why)
    elif shape is None or isinstance(shape, dict):  # no benchmark declared: the shape is the timer's p as given
        shape = dict(shape or {})
    else:
        get_spec(exercise_id)  # raises: a shape in words needs the exercise's benchmark defaults
    dtype = kernel_dtype(source, ex, dtype, "tuned")

    be = active_backend()
    refuse_unsupported(ex, be)
    if timer is None and be == "gpu":
        get_spec(exercise_id)  # timing at full size needs the exercise's benchmark declaration
        timer = gpu_timer()
    device = device_name() if be == "gpu" else EMULATOR
    build = _build_hash(source, ex.options, space)
    key = " | ".join([device, exercise_id, ",".join(f"{k}={v}" for k, v in shape.items()), dtype, build])
    path = cache_path()
    if timer is not None and cache and not refresh:
        hit = _read_cache(path).get(key)
        if hit is not None:
            return TuneResult(exercise_id, device, shape, dtype, ex.options, [Row(**r) for r in hit["rows"]],
                              cached=True)

    p = spec.params(shape) if spec is not None else SimpleNamespace(**shape)
    points = [SimpleNamespace(**c.params) for c in ex.visible_cases()] + ([p] if spec is not None or shape else [])
    flops = spec.flops(p) if spec is not None and spec.flops else None
    max_shared = _max_shared_bytes(be)
    configs, rows, timed = configurations(space), [], []
    for cfg in configs:
        rows.append(_try(ex, space, cfg, source, points, p, dtype, be, timer, flops, max_shared, timed))
        if progress is not None:
            progress(len(rows), len(configs), rows[-1])
    if hasattr(timer, "race"):
        _final(timed, p, dtype, timer, flops)
    note = None if timer is not None else "timing needs a GPU: " + REFUSAL.format(exercise=exercise_id)
    result = TuneResult(exercise_id, device, shape, dtype, ex.options, rows, note=note)
    if cache and result.best is not None:
        _write_cache(path, key, {"device": device, "exercise": exercise_id, "shape": shape, "dtype": dtype,
                                 "build": build, "tuned": time.strftime("%Y-%m-%d %H:%M:%S"),
                                 "rows": [dataclasses.asdict(r) for r in rows]})
    return result

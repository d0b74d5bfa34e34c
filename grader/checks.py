"""Judging a student's kernel against the float64 references.

An exercise is data (declared with the vocabulary of :mod:`grader.exercise_rows`): how to build
inputs for a case, the reference that gives the expected outputs, how the student's kernel is
launched, and the cases as rows. A check compiles the kernel *from its source string* (never
trusting the student's Python objects), launches every case on freshly poisoned outputs, and
on failure writes a message a student can act on: the case, how many elements differ, the
first few, what was never written, NaN/inf counts, and -- where a known wrong computation
reproduces the output -- the mistake itself. How outputs are compared and a failure is worded is
:mod:`grader.judge`'s; this module builds, launches and runs the cases.

Inputs must come back unchanged: every input array is compared bit for bit with its original
after the launch (on the emulator too: const arrays are copied back), so a write through a cast
pointer fails the case by name. When any case faults (race, out-of-bounds access, deadlock,
barrier misuse, time limit), that case's report is the one shown first (:attr:`CheckResult.first_failure`).
"""
from __future__ import annotations

import functools
import math
import os
import sys
import threading
import time
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
from threadpoolctl import threadpool_limits

from . import exercises  # noqa: F401  (declares every module's exercises)
from .arrays import empty, to_device, to_host, zeros
from .backend import backend as active_backend
from .errors import BackendUnavailableError, CourseError, KernelFault, KernelTimeoutError, RaceConditionError
from .device import models_for, runs_on
from .exercise_rows import REGISTRY, TRITON_REGISTRY, Case, Exercise, grading_seed
from .gpu import compute_capability
from .judge import (CaseResult, CheckResult, changed_inputs, compare, compose, dtype_name, error_ratio, fit_every_case,
                    generic_diagnosis, magnitudes, mistake_fits, output_values, tolerance)
from .kernel import RawKernel
from .triton_checks import run_triton_check

CHECK_TIME_LIMIT = 16.0  # CPU seconds one case's launch may use (the worker's, all threads): 8 s on two idle cores
PROGRESS_AFTER = 3.0  # seconds a check runs before it says which case it is on


def get_exercise(exercise_id: str) -> Exercise:
    if exercise_id in TRITON_REGISTRY:
        return TRITON_REGISTRY[exercise_id]
    if exercise_id not in REGISTRY:
        raise CourseError(f"no exercise named {exercise_id!r}. Known: {', '.join(sorted(REGISTRY | TRITON_REGISTRY))}")
    return REGISTRY[exercise_id]


class CheckFailed(AssertionError, CourseError):
    """Raised by :func:`check` when a case fails; the message is the full explanation."""


# --------------------------------------------------------------------------- running


def source_of(kernel) -> str:
    """The kernel's source text. Only the string is used: the check compiles its own kernel."""
    if isinstance(kernel, str):
        return kernel
    code = getattr(kernel, "code", None)
    if code is None and type(kernel).__name__ == "TritonProgram":
        code = kernel.source
    if not isinstance(code, str):
        raise CourseError("check(exercise, kernel): pass the kernel made by %%cuda or %%triton (or its source string)")
    return str(code)


def _launch(ex: Exercise, compiled, c: Case, seed: int, race_check: bool = False, time_limit: float | None = None):
    """:func:`launch_case`, also returning the input arrays as they came back from the device."""
    p = SimpleNamespace(**c.params)
    inputs = ex.make_inputs(p, np.random.default_rng(seed))
    expected = ex.reference(p, inputs)
    arrays = {k: to_device(v, dtype=v.dtype) for k, v in inputs.items()}
    for name, spec in (ex.outputs | ex.scratch).items():
        shape, dtype = spec(p)
        arrays[name] = zeros(shape, dtype) if name in ex.zeroed else empty(shape, dtype)
    extra = ({"race_check": True} if race_check else {}) | ({"time_limit": time_limit} if time_limit else {})
    smem = ex.shared_mem(p)
    # The launch shape is the exercise's contract, so the check opts in to the shared memory it names.
    kernel = compiled.func if isinstance(compiled, functools.partial) else compiled
    if hasattr(kernel, "max_dynamic_shared_size_bytes"):  # (a test may pass any callable)
        kernel.max_dynamic_shared_size_bytes = max(kernel.max_dynamic_shared_size_bytes, smem)
    compiled(ex.grid(p), ex.block(p), ex.args(p, SimpleNamespace(**arrays)), shared_mem=smem, **extra)
    got = {name: to_host(arrays[name]) for name in ex.outputs}
    after = {name: to_host(arrays[name]) for name in inputs if name not in ex.outputs and name not in ex.scratch}
    return p, inputs, expected, got, after


def launch_case(ex: Exercise, compiled, c: Case, seed: int, race_check: bool = False):
    """Build a case's inputs, launch ``compiled`` on poisoned outputs; return
    ``(p, inputs, expected, got)`` with host arrays. Kernel faults propagate."""
    return _launch(ex, compiled, c, seed, race_check)[:4]


def check_time_limit() -> float:
    """CPU seconds one case may use on the emulator during a check (``GRADER_CHECK_TIME_LIMIT``).
    CPU time, not time on the clock: a busy machine slows a correct kernel down without adding to
    it, while a kernel that never ends burns it and is stopped after this (the emulator's wall-clock
    cap, far above, catches one blocked without using the CPU); the cases after it are not run, so
    one endless loop costs seconds, not a cell's timeout."""
    if "GRADER_CHECK_TIME_LIMIT" in os.environ:
        return float(os.environ["GRADER_CHECK_TIME_LIMIT"])
    return min(CHECK_TIME_LIMIT, float(os.environ.get("GRADER_TIME_LIMIT", CHECK_TIME_LIMIT)))


THREADS_PER_LIMIT = 2**22  # threads the emulator runs well within one check time limit


def _thread_factor(ex: Exercise, c: Case) -> float:
    """1, or the launch's thread count over THREADS_PER_LIMIT when it is larger."""
    p = SimpleNamespace(**c.params)
    try:
        threads = math.prod(_dims(ex.grid(p))) * math.prod(_dims(ex.block(p)))
    except (AttributeError, TypeError):
        return 1.0
    return max(1.0, threads / THREADS_PER_LIMIT)


def _dims(d) -> tuple:
    return tuple(d) if isinstance(d, (tuple, list)) else (int(d),)


def run_case(ex: Exercise, compiled, c: Case, seed: int, be: str, race_check: bool = False) -> CaseResult:
    shown = c.describe(with_seed=not c.hidden)
    # The race detector's shadow memory makes a launch a few times slower; a launch of many million
    # threads (the cases past 2^24 elements) needs time in proportion, whatever the kernel does.
    limit = check_time_limit() * (3 if race_check else 1) * _thread_factor(ex, c) if be == "cpu" else None
    try:
        p, inputs, expected, got, after = _launch(ex, compiled, c, seed, race_check, limit)
    except RaceConditionError as err:
        hint = "" if err.explained else ("\n  Look for a missing __syncthreads(): after loading a tile, and again "
                                          "before the next iteration overwrites it.")
        return CaseResult(c, False, f"case {shown}: threads race on memory.\n  {err}{hint}", fault=True)
    except KernelFault as err:
        text = str(err)
        what = "failed while running"
        if isinstance(err, KernelTimeoutError):
            what = "did not finish"
            text = text.replace("raise time_limit (or GRADER_TIME_LIMIT)",
                                f"set GRADER_CHECK_TIME_LIMIT (CPU seconds per case in a check, now {limit:g})")
        return CaseResult(c, False, f"case {shown}: the kernel {what} ({type(err).__name__}).\n  {text}", fault=True)
    wrote = changed_inputs(inputs, after)
    if wrote:
        return CaseResult(c, False, f"case {shown}: {wrote}")
    mags = magnitudes(ex, p, inputs)
    got, never = output_values(ex, p, got)
    margins = {}
    for name in ex.outputs:
        want = np.asarray(expected[name], dtype=np.float64)
        tol = tolerance(ex, name, dtype_name(ex, name, p), be)
        unwritten = never[name]
        diff = compare(name, got[name], want, tol, unwritten, be, mags.get(name), nan_causes=ex.nan_causes)
        if diff:  # the first wrong output explains the rest
            named, unfit = mistake_fits(ex, p, inputs, got, expected, be, mags)
            generic = None if named else generic_diagnosis(name, got[name], want, unwritten, c.params)
            head = f"case {shown}: {diff}"
            return CaseResult(c, False, compose(head, named, generic), head=head, named=named, unfit=unfit,
                              generic=generic)
        margins[name] = error_ratio(got[name], want, tol, mags.get(name))
    return CaseResult(c, True, shown + (_race_note() if race_check else ""), margins=margins)


def _race_note() -> str:
    """What a passing race-checked case says it was checked with."""
    from .emulator import clang  # (the emulator package only where a race check ran)

    if clang() is None:
        return ", run in two thread orders with the same results (race detector unavailable: install clang-16)"
    return ", with the race detector: no race"


def refuse_unsupported(ex: Exercise, be: str) -> None:
    """Raise, in one sentence, where the GPU lacks the architecture the exercise ``requires``."""
    if ex.requires is None or be != "gpu":
        return
    cc = compute_capability()
    if not runs_on(ex.requires, cc):
        raise BackendUnavailableError(
            f"{ex.id} needs {ex.requires} (an {models_for(ex.requires)}) and this GPU is sm_{cc}: run it on the CPU "
            "emulator instead (GRADER_BACKEND=cpu, or grader.set_backend('cpu') in a notebook).")


# A visible case has a fixed seed, so a kernel's result on it is the same each time it runs: a
# notebook's hidden test cell (the visible cases, then the grading ones) takes the visible cases that
# its visible test cell has just passed instead of running them again. A visible check keeps its
# passes (a failure or a fault is never kept: it may be the machine's), the next check with the
# hidden cases of the same kernel takes them once; only for registered exercises (a variant has
# other cases under the same name) and only for the last few kernels.
_PASSED_VISIBLE: dict = {}  # (exercise, backend, options, source) -> {(case name, seed, race checked): CaseResult}
_PASSED_VISIBLE_KERNELS = 4


def _visible_passes(ex: Exercise, be: str, options: tuple, source: str, *, hidden: bool) -> dict:
    """For a check with the hidden cases, the passes its visible check kept (taken, so used once);
    for a visible check, an empty dict that keeps them."""
    if REGISTRY.get(ex.id) is not ex:
        return {}
    key = (ex.id, be, options, source)
    if hidden:
        return _PASSED_VISIBLE.pop(key, {})
    memo = _PASSED_VISIBLE[key] = {}
    while len(_PASSED_VISIBLE) > _PASSED_VISIBLE_KERNELS:
        del _PASSED_VISIBLE[next(iter(_PASSED_VISIBLE))]
    return memo


def run_check(exercise_id: str | Exercise, source: str, *, include_hidden: bool = False, backend: str | None = None,
              seed: int | None = None, options: tuple = (), progress=None) -> CheckResult:
    """Judge ``source`` on an exercise's cases. Pure data in and out, so it can run anywhere.
    ``exercise_id`` may be an exercise row itself: a variant not in the registry (the autotuner's).
    ``progress``, a text stream: once the check has run PROGRESS_AFTER seconds, a line per case there.

    NumPy's BLAS runs on one thread meanwhile: the references and mistake models are small, and
    OpenBLAS's idle threads spin between calls, so on a busy machine they burned 3 to 4 times the
    check's own CPU time and slowed it far more than its share of the CPU fell."""
    with threadpool_limits(limits=1, user_api="blas"):
        return _run_check(exercise_id, source, include_hidden=include_hidden, backend=backend, seed=seed,
                          options=options, progress=progress)


def _run_check(exercise_id, source: str, *, include_hidden: bool, backend, seed, options: tuple,
               progress) -> CheckResult:
    ex = exercise_id if not isinstance(exercise_id, str) else get_exercise(exercise_id)
    if getattr(ex, "kind", "cuda") == "triton":
        return run_triton_check(ex, source, include_hidden=include_hidden, backend=backend, seed=seed)
    be = backend or active_backend()
    refuse_unsupported(ex, be)
    cases = ex.cases if include_hidden else ex.visible_cases()
    progress = _Progress(progress, ex.id)
    try:
        progress.step("compiling the kernel")
        compiled = RawKernel(source, ex.kernel, options=ex.options + tuple(options), backend=be).compile()
    except CourseError as err:
        msg = f"the kernel could not be built.\n  {err}\n  expected signature: {ex.signature}"
        return CheckResult(ex.id, be, [CaseResult(c, False, f"case {c.describe()}: {msg}") for c in cases[:1]])
    finally:
        progress.stop()
    base = grading_seed() if seed is None else seed
    results = []
    race_name = (ex.race_case or ex.visible_cases()[-1].name) if ex.race_check and be == "cpu" else None
    stuck = None  # the case whose launch ran out of time: the later ones are not run
    passed = _visible_passes(ex, be, ex.options + tuple(options), source, hidden=include_hidden)
    try:
        for i, c in enumerate(cases):
            case_seed = c.seed if not c.hidden else (base + 7919 * i) % 2**31
            race = c.name == race_name
            if stuck is not None:
                results.append(CaseResult(c, False, f"case {c.describe(not c.hidden)}: not run: the kernel did not "
                                                    f"finish case '{stuck}'", fault=True))
                continue
            if not c.hidden and (c.name, case_seed, race) in passed:
                results.append(replace(passed[c.name, case_seed, race]))
                continue
            progress.step(f"case {i + 1} of {len(cases)}: '{c.name}'" + (", with the race check" if race else ""))
            try:
                results.append(run_case(ex, compiled, c, case_seed, be, race_check=race))
                if not c.hidden and results[-1].passed:
                    passed[c.name, case_seed, race] = results[-1]
            except CourseError as err:
                results.append(CaseResult(c, False, f"case {c.describe(not c.hidden)}: {err}", fault=True))
            if "(KernelTimeoutError)" in results[-1].message:
                stuck = c.name
        fit_every_case(results)
        if ex.profile_check is not None and all(r.passed for r in results):
            progress.step("the memory profile")
            results.append(_profile_result(ex, compiled, be))
        if ex.io_check is not None and all(r.passed for r in results):
            progress.step("the bytes moved")
            results.append(_io_result(ex, compiled, be))
    finally:
        progress.stop()
    return CheckResult(ex.id, be, results)


class _Progress:
    """What a long check is doing, one line per step on ``stream``: a step is shown once the check
    has run PROGRESS_AFTER seconds (at once, or from a timer while the step still runs), so a short
    check stays silent, its output unchanged, and a long compile or case is named while it runs."""

    def __init__(self, stream, exercise_id: str):
        self.stream, self.exercise_id = stream, exercise_id
        self.started = time.monotonic()
        self.timer: threading.Timer | None = None

    def step(self, what: str) -> None:
        self.stop()
        if self.stream is None:
            return
        wait = PROGRESS_AFTER - (time.monotonic() - self.started)
        if wait <= 0:
            self._say(what)
        else:
            self.timer = threading.Timer(wait, self._say, (what,))
            self.timer.daemon = True
            self.timer.start()

    def stop(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _say(self, what: str) -> None:
        print(f"[{self.exercise_id}] {what} ({time.monotonic() - self.started:.0f} s so far)", file=self.stream,
              flush=True)


def _profile_result(ex: Exercise, compiled, be: str) -> CaseResult:
    """The exercise's memory property (``Exercise.profile_check``), judged on the emulator's
    profile of one case; the values have passed already. A GPU has no such profiler here."""
    c = next((c for c in ex.cases if c.name == ex.profile_case), None) or ex.visible_cases()[0]
    shown = c.describe()
    if be != "cpu":
        return CaseResult(c, True, f"{shown}: memory profile not checked: the profiler is part of the CPU "
                                   "emulator (GRADER_BACKEND=cpu)")
    try:
        launch_case(ex, functools.partial(compiled, profile=True), c, c.seed)
    except BackendUnavailableError as err:
        return CaseResult(c, True, f"{shown}: memory profile not checked: {err}")
    why = ex.profile_check(compiled.last_launch.profile, SimpleNamespace(**c.params))
    if why:
        return CaseResult(c, False, f"case {shown}: the values are right, but the memory profile is not.\n  {why}")
    return CaseResult(c, True, f"{shown}: memory profile as required")


def _io_result(ex: Exercise, compiled, be: str) -> CaseResult:
    """The exercise's traffic property (``Exercise.io_check``), judged on the emulator's byte counts
    of one case; the values have passed already."""
    c = next((c for c in ex.cases if c.name == ex.io_case), None) or ex.visible_cases()[0]
    shown = c.describe()
    if be != "cpu":
        return CaseResult(c, True, f"{shown}: bytes moved not checked: counting them is part of the CPU emulator "
                                   "(GRADER_BACKEND=cpu)")
    try:
        launch_case(ex, functools.partial(compiled, count_io=True), c, c.seed)
    except BackendUnavailableError as err:
        return CaseResult(c, True, f"{shown}: bytes moved not checked: {err}")
    why = ex.io_check(compiled.last_launch.io, SimpleNamespace(**c.params))
    if why:
        return CaseResult(c, False, f"case {shown}: the values are right, but the bytes moved are not.\n  {why}")
    return CaseResult(c, True, f"{shown}: bytes moved as required")


def check(exercise_id: str, kernel, *, hidden: bool = False, quiet: bool = False) -> None:
    """Check a kernel in a notebook: the visible cases, or with ``hidden=True`` the grading
    cases too. Prints one line per case; raises :class:`CheckFailed` explaining the first
    failure (so an nbgrader test cell fails with that message)."""
    # Progress on stdout: nbgrader scores a test cell that wrote to stderr as failed.
    result = run_check(exercise_id, source_of(kernel), include_hidden=hidden, progress=sys.stdout)
    if not quiet:
        print(result.summary())
    first = result.first_failure
    if first is not None:
        raise CheckFailed(f"{exercise_id}: {first.message}")

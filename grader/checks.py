"""Declaring exercises and judging a student's kernel against the float64 references.

An exercise is data: how to build inputs for a case, the reference that gives the expected
outputs, how the student's kernel is launched, and the cases as rows. A check compiles the
kernel *from its source string* (never trusting the student's Python objects), launches every
case on freshly poisoned outputs, and on failure writes a message a student can act on: the
case, how many elements differ, the first few, what was never written, NaN/inf counts, and --
where a known wrong computation reproduces the output -- the mistake itself.
"""
from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Callable

import numpy as np

from .arrays import empty, never_written, to_device, to_host, zeros
from .backend import backend as active_backend
from .errors import CourseError, KernelFault, RaceConditionError

# |got - expected| <= atol + rtol * |expected|, by output dtype and backend. The emulator runs
# IEEE float32 without FMA contraction; GPUs contract to FMA and use approximate __expf, so
# they get a little more room. Half precisions carry 11 (fp16) and 8 (bf16) significant bits.
TOLERANCES = {
    ("float32", "cpu"): (2e-5, 2e-5),
    ("float32", "gpu"): (1e-4, 1e-4),
    ("float16", "cpu"): (4e-3, 4e-3),
    ("float16", "gpu"): (5e-3, 5e-3),
    ("bfloat16", "cpu"): (2e-2, 2e-2),
    ("bfloat16", "gpu"): (3e-2, 3e-2),
    ("int32", "cpu"): (0, 0),
    ("int32", "gpu"): (0, 0),
}
SHOW_MISMATCHES = 5


@dataclass(frozen=True)
class Case:
    """One row of an exercise's test table: a name, the shape parameters, and a seed."""

    name: str
    params: dict
    seed: int = 0
    hidden: bool = False

    def describe(self, with_seed: bool = True) -> str:
        shape = ", ".join(f"{k}={v}" for k, v in self.params.items())
        seed = f", seed={self.seed}" if with_seed else ""
        return f"'{self.name}' ({shape}{seed})"


def case(name: str, seed: int = 0, **params) -> Case:
    return Case(name, params, seed)


def hidden(name: str, **params) -> Case:
    """A grading-only case; its seed is drawn when grading (see :func:`grading_seed`)."""
    return Case(name, params, 0, hidden=True)


@dataclass(frozen=True)
class Mistake:
    """A recognisable wrong computation: if the kernel's outputs match ``wrong(p, inputs)``
    (and the correct outputs differ from it on that case), the check names ``explain``."""

    name: str
    explain: str
    wrong: Callable


@dataclass
class Exercise:
    id: str
    module: str
    kernel: str
    signature: str
    launch_shape: str  # how the kernel is launched, in words, for students
    make_inputs: Callable  # (p, rng) -> dict of host arrays (float32/...)
    outputs: dict  # name -> (p -> (shape, dtype))
    reference: Callable  # (p, inputs) -> dict name -> float64 array
    args: Callable  # (p, arrays) -> tuple of kernel args in signature order
    grid: Callable  # p -> grid
    block: Callable  # p -> block
    cases: list
    shared_mem: Callable = lambda p: 0
    scratch: dict = field(default_factory=dict)  # name -> (p -> (shape, dtype)): poisoned work arrays, not compared
    zeroed: tuple = ()  # outputs the launch expects zero-filled (kernels that accumulate with atomics)
    mistakes: list = field(default_factory=list)
    race_check: bool = False  # run one case under the race detector (and a second schedule) on the emulator
    race_case: str | None = None  # default: the last visible case, usually the largest (a barrier race needs several tiles)
    options: tuple = ()

    def visible_cases(self):
        return [c for c in self.cases if not c.hidden]


REGISTRY: dict[str, Exercise] = {}


def exercise(**kwargs) -> Exercise:
    ex = Exercise(**kwargs)
    if ex.id in REGISTRY:
        raise ValueError(f"exercise {ex.id!r} declared twice")
    REGISTRY[ex.id] = ex
    return ex


def get_exercise(exercise_id: str) -> Exercise:
    from . import exercises  # noqa: F401  (declares every module's exercises)

    if exercise_id not in REGISTRY:
        raise CourseError(f"no exercise named {exercise_id!r}. Known: {', '.join(sorted(REGISTRY))}")
    return REGISTRY[exercise_id]


def grading_seed() -> int:
    """Seed base for hidden cases: the instructor's secret ``GRADER_SEED`` if set, else fresh
    randomness, so no submission can hard-code the outputs of a public repository's cases."""
    env = os.environ.get("GRADER_SEED")
    return int(env) if env else secrets.randbits(31)


# --------------------------------------------------------------------------- results


class CheckFailed(AssertionError, CourseError):
    """Raised by :func:`check` when a case fails; the message is the full explanation."""


@dataclass
class CaseResult:
    case: Case
    passed: bool
    message: str


@dataclass
class CheckResult:
    exercise: str
    backend: str
    results: list

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    def summary(self) -> str:
        lines = []
        for r in self.results:
            mark = "PASS" if r.passed else "FAIL"
            text = r.message.splitlines()[0] if not r.passed else "case " + r.message
            lines.append(f"[{mark}] {self.exercise} {text}")
        n = sum(r.passed for r in self.results)
        lines.append(f"{self.exercise}: {n}/{len(self.results)} cases passed on the {self.backend} backend")
        return "\n".join(lines)


# --------------------------------------------------------------------------- comparing


def _within(got, want, rtol, atol):
    with np.errstate(invalid="ignore"):
        close = np.abs(got - want) <= atol + rtol * np.abs(want)
    same_inf = np.isinf(want) & (got == want)
    both_nan = np.isnan(want) & np.isnan(got)
    return close | same_inf | both_nan


def _fmt_index(name, idx):
    return f"{name}[{', '.join(str(int(i)) for i in idx)}]"


def compare(name: str, got: np.ndarray, want: np.ndarray, tol, unwritten: np.ndarray, backend: str = "cpu") -> str | None:
    """None when ``got`` matches ``want``; otherwise a description of how it differs."""
    rtol, atol = tol
    gotf = got.astype(np.float64)
    ok = _within(gotf, want, rtol, atol)
    if ok.all():
        return None
    bad = ~ok
    total = want.size
    lines = [f"{int(bad.sum())} of {total} elements of {name} {tuple(want.shape)} differ."]
    never = unwritten & bad
    if never.any():
        first = np.argwhere(never)[0]
        lines.append(
            f"  {int(never.sum())} element(s) of {name} were never written (still poisoned), "
            f"the first at {_fmt_index(name, first)}."
        )
    computed_nan = np.isnan(gotf) & ~unwritten & ~np.isnan(want)
    if computed_nan.any():
        lines.append(f"  {int(computed_nan.sum())} element(s) are NaN computed by the kernel, the first at {_fmt_index(name, np.argwhere(computed_nan)[0])}.")
        lines.append("  NaN comes from inf - inf, 0 * inf or 0 / 0: e.g. exp(m_old - m_new) when both maxima are "
                     "-INFINITY (no key seen yet, or all masked: subtract 0 instead), or l = 0 for a row with no keys.")
        if backend == "cpu":
            lines.append("  On the emulator shared memory also starts as NaN, so reading a tile element no thread "
                         "stored (edges of a partial tile not zero-filled) shows up here.")
    infs = np.isinf(gotf) & ~np.isinf(want)
    if infs.any():
        lines.append(f"  {int(infs.sum())} element(s) are +-inf where a finite value was expected, the first at {_fmt_index(name, np.argwhere(infs)[0])}.")
    written_bad = np.argwhere(bad & ~unwritten)[:SHOW_MISMATCHES]
    if len(written_bad):
        lines.append("  first mismatches (got vs expected):")
        for idx in written_bad:
            t = tuple(idx)
            lines.append(f"    {_fmt_index(name, idx)}: {gotf[t]:.6g} vs {want[t]:.6g}")
    return "\n".join(lines)


def _generic_diagnosis(name, got, want, unwritten, p) -> str | None:
    """Mistakes recognisable from the numbers alone, whatever the exercise."""
    if unwritten.all():
        return f"nothing was written to {name}: is the kernel body empty, or does the bounds guard exclude every thread?"
    written = ~unwritten
    if unwritten.any() and want.ndim >= 1:
        flat = unwritten.reshape(-1)
        k = int(np.argmax(flat))
        if flat[k:].all():
            return (f"only the first {k} of {flat.size} elements of {name} were written: the grid or a loop "
                    "bound stops short (round up with ceil_div, and handle the last partial tile).")
    g, w = got.astype(np.float64)[written], want[written]
    finite = np.isfinite(g) & np.isfinite(w) & (np.abs(w) > 1e-6)
    if finite.sum() >= 4:
        ratio = g[finite] / w[finite]
        r = float(np.median(ratio))
        if abs(r - 1) > 1e-3 and np.allclose(ratio, r, rtol=1e-3) and r != 0:
            scale = p.get("scale") or (1 / np.sqrt(p["d"]) if "d" in p else None)
            extra = ""
            if scale and np.isclose(r, scale, rtol=1e-3):
                extra = " That factor is the softmax scale: it is applied twice."
            elif scale and np.isclose(r, 1 / scale, rtol=1e-3):
                extra = " That factor is 1/scale: the scale is never applied."
            return f"every element of {name} is off by the same factor {r:.6g}.{extra}"
    if want.ndim >= 2 and written.all():
        with np.errstate(divide="ignore", invalid="ignore"):
            rows = got.astype(np.float64) / want
        rows = rows.reshape(-1, want.shape[-1])
        ok = np.isfinite(rows).all() and want.shape[-1] > 1
        if ok:
            per_row = np.median(rows, axis=1)
            constant_in_row = np.allclose(rows, per_row[:, None], rtol=1e-3)
            if constant_in_row and not np.allclose(per_row, per_row[0], rtol=1e-3):
                return (f"each row of {name} is off by its own factor (from {per_row.min():.4g} to {per_row.max():.4g}): "
                        "a per-row normalisation is missing or wrong, e.g. not dividing by the row sum l.")
    if written.all() and np.isfinite(g).all() and np.isfinite(w).all():
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.abs(g - w) / np.maximum(np.abs(w), 1e-3)
        if rel.max() < 3e-2:
            return (f"the values are close but outside the tolerance (largest relative error {rel.max():.2g}): "
                    "something computes in lower precision (a __half intermediate?) or loses digits "
                    "(subtracting nearly equal numbers, __expf on large arguments).")
    if want.ndim >= 2 and want.shape[-1] == want.shape[-2] and written.all():
        wt = np.swapaxes(want, -1, -2)
        if np.allclose(got, wt, rtol=1e-4, atol=1e-4) and not np.allclose(want, wt, rtol=1e-4, atol=1e-4):
            return f"{name} is the transpose of what was expected: rows and columns are swapped."
    return None


# --------------------------------------------------------------------------- running


def _source_of(kernel) -> str:
    """The kernel's source text. Only the string is used: the check compiles its own kernel."""
    if isinstance(kernel, str):
        return kernel
    code = getattr(kernel, "code", None)
    if not isinstance(code, str):
        raise CourseError("check(exercise, kernel): pass the kernel made by %%cuda (or its source string)")
    return str(code)


def launch_case(ex: Exercise, compiled, c: Case, seed: int, race_check: bool = False):
    """Build a case's inputs, launch ``compiled`` on poisoned outputs; return
    ``(p, inputs, expected, got)`` with host arrays. Kernel faults propagate."""
    p = SimpleNamespace(**c.params)
    inputs = ex.make_inputs(p, np.random.default_rng(seed))
    expected = ex.reference(p, inputs)
    arrays = {k: to_device(v, dtype=v.dtype) for k, v in inputs.items()}
    for name, spec in (ex.outputs | ex.scratch).items():
        shape, dtype = spec(p)
        arrays[name] = zeros(shape, dtype) if name in ex.zeroed else empty(shape, dtype)
    extra = {"race_check": True} if race_check else {}
    compiled(ex.grid(p), ex.block(p), ex.args(p, SimpleNamespace(**arrays)), shared_mem=ex.shared_mem(p), **extra)
    return p, inputs, expected, {name: to_host(arrays[name]) for name in ex.outputs}


def run_case(ex: Exercise, compiled, c: Case, seed: int, be: str, race_check: bool = False) -> CaseResult:
    shown = c.describe(with_seed=not c.hidden)
    try:
        p, inputs, expected, got = launch_case(ex, compiled, c, seed, race_check)
    except RaceConditionError as err:
        hint = "" if err.explained else ("\n  Look for a missing __syncthreads(): after loading a tile, and again "
                                          "before the next iteration overwrites it.")
        return CaseResult(c, False, f"case {shown}: threads race on memory.\n  {err}{hint}")
    except KernelFault as err:
        return CaseResult(c, False, f"case {shown}: the kernel failed while running ({type(err).__name__}).\n  {err}")
    for name in ex.outputs:
        want = np.asarray(expected[name], dtype=np.float64)
        dtype = np.dtype(ex.outputs[name](p)[1]).name
        unwritten = never_written(got[name])
        diff = compare(name, got[name], want, TOLERANCES[(dtype, be)], unwritten, be)
        if diff:  # the first wrong output explains the rest
            hint = _named_mistake(ex, p, inputs, got, expected, be) or _generic_diagnosis(name, got[name], want, unwritten, c.params)
            return CaseResult(c, False, f"case {shown}: {diff}" + (f"\n  Likely mistake: {hint}" if hint else ""))
    return CaseResult(c, True, shown)


def _named_mistake(ex, p, inputs, got, expected, be) -> str | None:
    for m in ex.mistakes:
        wrong = m.wrong(p, inputs)
        if wrong is None:
            continue
        matches, distinct = True, False
        for name, w in wrong.items():
            dtype = np.dtype(ex.outputs[name](p)[1]).name
            rtol, atol = TOLERANCES[(dtype, be)]
            w = np.asarray(w, dtype=np.float64)
            loose = (rtol * 10, atol * 10)
            g = got[name].astype(np.float64)
            # A buggy kernel often leaves a row it masked completely as 0/0 = NaN where the
            # simulated mistake writes that row's convention (O = 0, L = -inf): same mistake.
            empty_row = np.isnan(g) & ((w == 0) | np.isneginf(w))
            if not (_within(g, w, *loose) | empty_row).all():
                matches = False
                break
            if not _within(np.asarray(expected[name], dtype=np.float64), w, *loose).all():
                distinct = True
        if matches and distinct:
            return f"{m.name}: {m.explain}"
    return None


def run_check(exercise_id: str, source: str, *, include_hidden: bool = False, backend: str | None = None,
              seed: int | None = None, options: tuple = ()) -> CheckResult:
    """Judge ``source`` on an exercise's cases. Pure data in and out, so it can run anywhere."""
    from .kernel import RawKernel

    ex = get_exercise(exercise_id)
    be = backend or active_backend()
    cases = ex.cases if include_hidden else ex.visible_cases()
    try:
        compiled = RawKernel(source, ex.kernel, options=ex.options + tuple(options), backend=be).compile()
    except CourseError as err:
        msg = f"the kernel could not be built.\n  {err}\n  expected signature: {ex.signature}"
        return CheckResult(ex.id, be, [CaseResult(c, False, f"case {c.describe()}: {msg}") for c in cases[:1]])
    base = grading_seed() if seed is None else seed
    results = []
    race_name = (ex.race_case or ex.visible_cases()[-1].name) if ex.race_check and be == "cpu" else None
    for i, c in enumerate(cases):
        case_seed = c.seed if not c.hidden else (base + 7919 * i) % 2**31
        race = c.name == race_name
        try:
            results.append(run_case(ex, compiled, c, case_seed, be, race_check=race))
        except CourseError as err:
            results.append(CaseResult(c, False, f"case {c.describe(not c.hidden)}: {err}"))
    return CheckResult(ex.id, be, results)


def check(exercise_id: str, kernel, *, hidden: bool = False, quiet: bool = False) -> None:
    """Check a kernel in a notebook: the visible cases, or with ``hidden=True`` the grading
    cases too. Prints one line per case; raises :class:`CheckFailed` explaining the first
    failure (so an nbgrader test cell fails with that message)."""
    result = run_check(exercise_id, _source_of(kernel), include_hidden=hidden)
    if not quiet:
        print(result.summary())
    failed = [r for r in result.results if not r.passed]
    if failed:
        raise CheckFailed(f"{exercise_id}: {failed[0].message}")

"""The judge: how a case's outputs compare with the float64 reference, and what a failure says.

Tolerances, the comparison and its message, the diagnoses recognisable from the numbers alone,
and the fitting of an exercise's declared mistakes to a kernel's outputs. Pure NumPy on host
arrays: it runs no kernel, so the CUDA runner (grader/checks.py) and the Triton runner
(grader/triton_checks.py) share it.

The comparison rule
-------------------
An element passes when

    want is finite and  |got - want| <= atol + rtol * max(|want|, size)
    want is +inf or -inf and  got == want   (same sign: 0, -1e30, -FLT_MAX or +inf where
                                             -inf is expected all fail)
    want is NaN and  got is NaN              (NaN anywhere else fails)

``(rtol, atol)`` come from ``TOLERANCES`` (output dtype, backend). ``size`` is the size of the
terms the element is computed from, declared per exercise (``Exercise.magnitude``): for a
matmul ``sum_k |a_ik b_kj|``; for attention outputs ``(1 + R_i) * sum_j P_ij |V_jc|`` with
``R_i = max_j scale * sum_c |q_ic k_jc|`` (a float32 score carries an absolute error of a few
ulps of R_i, which exp turns into a relative error of P); for L = m + log l, ``|L_i| + R_i``; the
backward outputs likewise from |P|, |dS| and the inputs. Without a declared size it is ``|want|``.
So a correct float32 kernel stays well inside the tolerance however large the logits (checked by
``tests/checks/test_correct_kernels.py``: no solution comes within a factor 3 of it), while a wrong one
is not hidden behind a loose absolute bound.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .arrays import BF16, bf16_values, never_written
from .exercise_rows import EMULATOR_NAN, SOFTMAX_NAN, Case, Exercise

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


# --------------------------------------------------------------------------- results


@dataclass
class CaseResult:
    case: Case
    passed: bool
    message: str
    fault: bool = False  # the kernel faulted (race, out of bounds, barrier, time limit, ...)
    # Numbers that failed: the message without its diagnosis, the declared mistakes that reproduce
    # them ("name: explain"), those whose model applies here but does not, and the generic diagnosis.
    head: str = ""
    named: list = field(default_factory=list)
    unfit: set = field(default_factory=set)
    generic: str | None = None
    # A case that passed: how close each output came to the edge of the tolerance (error_ratio).
    margins: dict = field(default_factory=dict)


@dataclass
class CheckResult:
    exercise: str
    backend: str
    results: list

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    @property
    def first_failure(self) -> CaseResult | None:
        """The failure to show first: the first case that faulted, else the first that failed.
        A fault (race, out-of-bounds access, ...) explains wrong numbers elsewhere, never the reverse."""
        failed = [r for r in self.results if not r.passed]
        return next((r for r in failed if r.fault), failed[0] if failed else None)

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


def _size(want, magnitude):
    """max(|want|, magnitude) with non-finite sizes made harmless (they only occur where the
    expected value is itself non-finite, which is compared exactly)."""
    size = np.abs(want)
    if magnitude is not None:
        size = np.maximum(size, np.broadcast_to(np.asarray(magnitude, np.float64), want.shape))
    return np.where(np.isfinite(size), size, 0.0)


def within(got, want, rtol, atol, magnitude=None):
    """Elementwise: does ``got`` match ``want`` under the rule of the module docstring."""
    finite = np.isfinite(want)
    with np.errstate(invalid="ignore", over="ignore"):
        close = finite & (np.abs(got - want) <= atol + rtol * _size(want, magnitude))
    same_inf = np.isinf(want) & (got == want)
    both_nan = np.isnan(want) & np.isnan(got)
    return close | same_inf | both_nan


def error_ratio(got, want, tol, magnitude=None) -> float:
    """The largest ``|got - want| / (atol + rtol * size)`` over the elements (1 = at the edge of
    the tolerance); ``inf`` when an infinity or NaN does not match."""
    rtol, atol = tol
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    finite = np.isfinite(want)
    if not within(got[~finite], want[~finite], rtol, atol).all() or not np.isfinite(got[finite]).all():
        return float("inf")
    if not finite.any():
        return 0.0
    allowed = atol + rtol * _size(want, magnitude)[finite]
    err = np.abs(got[finite] - want[finite])
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(err == 0, 0.0, err / allowed)  # exact outputs (integers) have no room at all
    return float(ratio.max())


def _fmt_index(name, idx):
    return f"{name}[{', '.join(str(int(i)) for i in idx)}]"


def compare(name: str, got: np.ndarray, want: np.ndarray, tol, unwritten: np.ndarray, backend: str = "cpu",
            magnitude=None, nan_source: str | None = None, nan_causes: str | None = None) -> str | None:
    """None when ``got`` matches ``want``; otherwise a description of how it differs. ``nan_source``: where
    else NaN can come from (default: the emulator's NaN-filled shared memory, on the CPU backend);
    ``nan_causes``: the usual computed causes in this kind of kernel (default: a softmax's)."""
    rtol, atol = tol
    gotf = got.astype(np.float64)
    ok = within(gotf, want, rtol, atol, magnitude)
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
    for sign, inf in (("-inf", -np.inf), ("+inf", np.inf)):
        missed = (want == inf) & bad & ~unwritten
        if missed.any():
            k = tuple(np.argwhere(missed)[0])
            lines.append(f"  {int(missed.sum())} element(s) of {name} are not {sign} where {sign} was expected, the "
                         f"first at {_fmt_index(name, k)} (got {gotf[k]:.6g}). Infinities must match exactly.")
            if sign == "-inf":
                lines.append("  -inf is the value of a row or state with no key at all (every key masked or "
                             "padding, or an empty partial state): write -INFINITY itself, not 0, -1e30, "
                             "-FLT_MAX or +INFINITY.")
    computed_nan = np.isnan(gotf) & ~unwritten & ~np.isnan(want)
    if computed_nan.any():
        lines.append(f"  {int(computed_nan.sum())} element(s) are NaN computed by the kernel, the first at {_fmt_index(name, np.argwhere(computed_nan)[0])}.")
        causes = SOFTMAX_NAN if nan_causes is None else nan_causes
        lines.append("  NaN comes from inf - inf, 0 * inf or 0 / 0" + (f": {causes}" if causes else "."))
        if nan_source or backend == "cpu":
            lines.append(nan_source or EMULATOR_NAN)
    infs = np.isinf(gotf) & np.isfinite(want)
    if infs.any():
        lines.append(f"  {int(infs.sum())} element(s) are +-inf where a finite value was expected, the first at {_fmt_index(name, np.argwhere(infs)[0])}.")
    written_bad = np.argwhere(bad & ~unwritten)[:SHOW_MISMATCHES]
    if len(written_bad):
        allowed = atol + rtol * _size(want, magnitude)
        lines.append("  first mismatches (got vs expected, allowed difference):")
        for idx in written_bad:
            t = tuple(idx)
            lines.append(f"    {_fmt_index(name, idx)}: {gotf[t]:.6g} vs {want[t]:.6g} (+-{allowed[t]:.2g})")
    return "\n".join(lines)


FLOAT_EXACT = 2**24  # the first integer past which float32 skips integers


def generic_diagnosis(name, got, want, unwritten, p) -> str | None:
    """Mistakes recognisable from the numbers alone, whatever the exercise."""
    if unwritten.all():
        return f"nothing was written to {name}: is the kernel body empty, or does the bounds guard exclude every thread?"
    if want.size > FLOAT_EXACT:
        with np.errstate(invalid="ignore"):
            wrong = (unwritten | ~np.isclose(got.astype(np.float64), want, rtol=1e-5, atol=1e-6, equal_nan=True)).reshape(-1)
        if wrong.any() and int(np.argmax(wrong)) >= FLOAT_EXACT:
            return (f"every wrong element of {name} lies past flat index 2^24 = {FLOAT_EXACT}, the first at "
                    f"{int(np.argmax(wrong))}: from there a float (24-bit significand) no longer holds every integer, "
                    "so an index computed in or stored as a float skips elements and repeats others. Keep indices "
                    "in int (or size_t).")
    written = ~unwritten
    heads = _whole_heads_unwritten(name, unwritten, p)
    if heads:
        return heads
    if unwritten.any() and want.ndim >= 1:
        flat = unwritten.reshape(-1)
        k = int(np.argmax(flat))
        with np.errstate(invalid="ignore"):
            prefix_right = np.isclose(got.reshape(-1)[:k].astype(np.float64), want.reshape(-1)[:k], rtol=1e-2,
                                      atol=1e-3, equal_nan=True).all()
        if flat[k:].all() and prefix_right:  # a wrong stride or index leaves a tail too, but wrong values before it
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
    if want.ndim >= 2 and written.all() and np.isfinite(want).all():
        with np.errstate(divide="ignore", invalid="ignore"):
            rows = got.astype(np.float64) / want
        rows = rows.reshape(-1, want.shape[-1])
        ok = np.isfinite(rows).all() and want.shape[-1] > 1
        if ok:
            per_row = np.median(rows, axis=1)
            constant_in_row = np.allclose(rows, per_row[:, None], rtol=1e-3)
            if constant_in_row and not np.allclose(per_row, per_row[0], rtol=1e-3) and (per_row != 0).all():
                return (f"each row of {name} is off by its own factor (from {per_row.min():.4g} to {per_row.max():.4g}): "
                        "a per-row normalisation is missing or wrong, e.g. not dividing by the row sum l.")
    if written.all() and np.isfinite(g).all() and np.isfinite(w).all():
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.abs(g - w) / np.maximum(np.abs(w), 1e-3)
        if rel.max() < 3e-2:
            return (f"the values are close but outside the tolerance (largest relative error {rel.max():.2g}): "
                    "as when something computes in lower precision (a half-precision intermediate?) or loses digits "
                    "(subtracting nearly equal numbers, a fast approximate exp on large arguments); a slip that "
                    "touches few terms "
                    "of a long sum (one key of many, one missed element) can look the same.")
    if want.ndim >= 2 and want.shape[-1] == want.shape[-2] and written.all():
        wt = np.swapaxes(want, -1, -2)
        if np.allclose(got, wt, rtol=1e-4, atol=1e-4) and not np.allclose(want, wt, rtol=1e-4, atol=1e-4):
            return f"{name} is the transpose of what was expected: rows and columns are swapped."
    return _rows_from_elsewhere(name, got, want, unwritten)


def _whole_heads_unwritten(name, unwritten, p) -> str | None:
    """An output laid out [B, H, ...] whose never-written elements are whole (batch, head) slices
    while other slices were written: each head's offset or the grid's batch/head extent is wrong
    (every block wrote into the slices of other heads), not a loop bound."""
    b, h = p.get("B"), p.get("H")
    if not b or not h or b * h < 2 or unwritten.ndim < 3 or unwritten.shape[:2] != (b, h):
        return None
    per_slice = unwritten.reshape(b * h, -1)
    empty, touched = per_slice.all(axis=1), per_slice.any(axis=1)
    if not empty.any() or empty.all() or (touched & ~empty).any():
        return None
    missing = [divmod(int(k), h) for k in np.flatnonzero(empty)]
    shown = ", ".join(f"{name}[{bb}, {hh}]" for bb, hh in missing[:4]) + (" ..." if len(missing) > 4 else "")
    return (f"{len(missing)} of the {b * h} (batch, head) slices of {name} {'was' if len(missing) == 1 else 'were'} "
            f"never written ({shown}), while the others were: a block writes into another head's slice. Check the offset of each head, "
            f"(b * H + h) * (the elements of one head), with b and h both taken from the block index (grid = "
            f"(..., H, B): h = blockIdx.y, b = blockIdx.z), for every array a block reads or writes ({name} included).")


def _rows_from_elsewhere(name, got, want, unwritten) -> str | None:
    """Wrong rows that hold, to the digit, what other rows of the output should: the row a thread
    computes is not the row it stores (or it reads another row of an input). Rows are the last axis."""
    if want.ndim < 2 or want.shape[-1] < 4:
        return None
    g = got.astype(np.float64).reshape(-1, want.shape[-1])
    w = want.reshape(-1, want.shape[-1])
    if len(w) > 4096 or not np.isfinite(w).all():
        return None
    with np.errstate(invalid="ignore"):
        row_ok = np.isclose(g, w, rtol=1e-2, atol=1e-3).all(axis=1)
    wrong = np.flatnonzero(~row_ok & ~unwritten.reshape(len(w), -1).any(axis=1) & np.isfinite(g).all(axis=1))
    if len(wrong) < 2:
        return None
    scale = np.abs(w).max(axis=1, keepdims=True) + 1e-6
    found = []
    for r in wrong[:64]:
        dist = (np.abs(w - g[r]) / scale).max(axis=1)
        dist[r] = np.inf
        k = int(np.argmin(dist))
        if dist[k] < 1e-2 and not np.isclose(w[k], w[r], rtol=1e-2, atol=1e-3).all():
            found.append((int(r), k))
    if len(found) < max(2, 0.5 * min(len(wrong), 64)):
        return None
    shape = want.shape[:-1]
    at = lambda r: ", ".join(str(int(i)) for i in np.unravel_index(r, shape))
    r, k = found[0]
    more = f" (and {len(wrong) - 1} more wrong rows, {len(found)} of the first {min(len(wrong), 64)} alike)"
    return (f"wrong rows of {name} hold the values other rows should have: {name}[{at(r)}, :] is what "
            f"{name}[{at(k)}, :] should be{more}. The row a thread (or warp) computes is not the row it stores, or it "
            "reads another row of an input: compare the row index of the load (a Q row, a fragment's row g or g + 8, a "
            "warp's first row) with the row index of the store.")


def changed_inputs(inputs: dict, after: dict) -> str | None:
    """None when every input came back bit for bit; otherwise which one the kernel wrote into."""
    for name, now in after.items():
        orig, now = inputs[name], np.asarray(now)
        a, b = np.ascontiguousarray(orig).view(np.uint8), np.ascontiguousarray(now).view(np.uint8)
        if a.shape == b.shape and np.array_equal(a, b):
            continue
        diff = np.asarray(orig) != now
        if np.asarray(orig).dtype.kind == "f":
            diff &= ~(np.isnan(orig) & np.isnan(now))
        k = np.argwhere(diff)[0] if diff.any() else np.zeros(np.ndim(orig), int)
        t = tuple(k)
        return (f"the kernel wrote into its input {name}: {int(diff.sum())} of {np.size(orig)} elements changed, "
                f"the first {_fmt_index(name, k)} from {np.asarray(orig)[t]!r} to {now[t]!r}. Inputs are read-only "
                "(`const`): never write through a cast pointer; keep intermediate values in registers, shared "
                "memory or the outputs (the caller still needs its inputs, e.g. Q, K and V for the backward pass).")
    return None


def dtype_name(ex: Exercise, name: str, p) -> str:
    dtype = ex.outputs[name](p)[1]
    return BF16 if dtype == BF16 else np.dtype(dtype).name


def output_values(ex: Exercise, p, got: dict) -> tuple[dict, dict]:
    """(values, never-written masks) of the outputs: bfloat16 bits read as float32."""
    values, unwritten = {}, {}
    for name, raw in got.items():
        dtype = dtype_name(ex, name, p)
        unwritten[name] = never_written(raw, dtype)
        values[name] = bf16_values(raw) if dtype == BF16 else raw
    return values, unwritten


def tolerance(ex: Exercise, name: str, dtype: str, be: str):
    return ex.tolerance.get(name) or TOLERANCES[(dtype, be)]


def magnitudes(ex: Exercise, p, inputs) -> dict:
    return ex.magnitude(p, inputs) if ex.magnitude is not None else {}


# --------------------------------------------------------------------------- diagnoses


def _names(named: list) -> str:
    """Several mistakes that reproduce one case's numbers: all of them, the first as the likely one."""
    return named[0] + "".join(f"\n  Or (the same numbers on this case): {f}" for f in named[1:])


def compose(head: str, named: list, generic: str | None, caveat: str = "") -> str:
    hint = _names(named) if named else generic
    return head + (f"\n  Likely mistake: {hint}" if hint else "") + caveat


def fit_every_case(results: list) -> None:
    """A diagnosis must explain every failing case it applies to, not only the one it is shown on:
    a named mistake whose model applies to another failing case but does not reproduce it is
    dropped where another name fits all of them, and otherwise kept with that case named."""
    failing = [r for r in results if not r.passed and r.named]
    for r in failing:
        others = [o for o in results if not o.passed and o is not r and o.head]
        keep = [n for n in r.named if not any(n in o.unfit for o in others)]
        if keep == r.named:
            continue
        if keep:
            r.named = keep
            r.message = compose(r.head, keep, r.generic)
        else:
            odd = next(o for o in others if r.named[0] in o.unfit)
            r.message = compose(r.head, r.named, r.generic,
                                 f"\n  (On case '{odd.case.name}', which fails too, the numbers do not fit this "
                                 "mistake: there may be another one, or a different one.)")


def named_mistake(ex, p, inputs, got, expected, be, mags=None) -> str | None:
    """Every declared mistake that reproduces the outputs on this case (all of them when
    several do: a kernel's numbers cannot tell them apart here), or None."""
    found = mistake_fits(ex, p, inputs, got, expected, be, mags)[0]
    return _names(found) if found else None


def mistake_fits(ex, p, inputs, got, expected, be, mags=None) -> tuple[list, set]:
    """(the declared mistakes, as "name: explain", that reproduce the outputs on this case, in
    declaration order; those whose model applies to this case but does not reproduce them). A model
    that reproduces them but gives the right answer here too (a mistake this case cannot show) is in
    neither: it is no evidence against that mistake."""
    mags = mags or {}
    found, tried = [], set()
    for m in ex.mistakes:
        wrong = m.wrong(p, inputs)
        if wrong is None:
            continue
        matches, distinct = True, False
        for name, w in wrong.items():
            dtype = dtype_name(ex, name, p)
            rtol, atol = tolerance(ex, name, dtype, be)
            w = np.asarray(w, dtype=np.float64)
            loose = (rtol * 10, atol * 10)
            g = got[name].astype(np.float64)
            # A buggy kernel often leaves a row it masked completely as 0/0 = NaN where the
            # simulated mistake writes that row's convention (O = 0, L = -inf): same mistake.
            empty_row = np.isnan(g) & ((w == 0) | np.isneginf(w))
            if not (within(g, w, *loose, mags.get(name)) | empty_row).all():
                matches = False
                break
            want = np.asarray(expected[name], dtype=np.float64)
            if not within(want, w, *loose, mags.get(name)).all():
                distinct = True
            else:  # under a loose tolerance (bfloat16's, say) the model may sit near the right answer and still
                # explain the outputs far better than it does: somewhere off by more than the tolerance, and
                # at least 4 times closer to what the kernel wrote than to the right answer
                with np.errstate(invalid="ignore"):
                    better = np.abs(w - want) > 4 * np.abs(w - g)
                distinct = distinct or bool((~within(want, w, rtol, atol, mags.get(name)) & better).any())
        if not matches:
            tried.add(f"{m.name}: {m.explain}")
        elif distinct and f"{m.name}: {m.explain}" not in found:  # (one mistake may have several models)
            found.append(f"{m.name}: {m.explain}")
    return found, tried - set(found)

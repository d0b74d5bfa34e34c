"""Judging a ``%%triton`` cell: the same cases, references, comparison and failure reports as the
CUDA checks (:mod:`grader.checks`), with the launcher called on torch tensors.

Per check the cell's source is imported as a fresh module (:func:`grader.triton_support.load_module`),
so nothing the notebook did to its own objects reaches the grade. Per case: inputs are drawn and
rounded to the case's dtype, handed over as tensors (as transposed views where the exercise says
so, so a launcher that ignores strides fails), outputs are preallocated and poisoned, the launcher
runs under a time limit, inputs must come back bit for bit, and every output is compared with the
float64 reference (at the exercise's ``case_tolerance`` where it declares one: float32 gradients of
half-precision products). After every case passes, an exercise with a
``work_check`` is judged on the multiply-adds its ``tl.dot`` calls did (counted by the interpreter).
"""
from __future__ import annotations

import dataclasses
import warnings
from types import SimpleNamespace

import numpy as np

from . import triton_support as ts
from .arrays import poison_host
from .backend import backend as active_backend
from .errors import CourseError
from .exercise_rows import grading_seed
from .judge import CaseResult, CheckResult, compare, dtype_name, generic_diagnosis, magnitudes, named_mistake, \
    output_values, tolerance


def _to_torch(arr: np.ndarray, dev: str, order=None):
    """A tensor holding ``arr`` (uint16: bfloat16 bits). With ``order``, the storage is laid out in
    that axis order and the tensor returned is the view with ``arr``'s own axes."""
    import torch

    host = np.asarray(arr)
    if order is not None:
        host = np.ascontiguousarray(host.transpose(order))
    if host.dtype == np.uint16:
        t = torch.from_numpy(host.view(np.int16).copy()).view(torch.bfloat16)
    else:
        t = torch.from_numpy(np.ascontiguousarray(host).copy())
    t = t.to(dev)
    if order is not None:
        t = t.permute(*np.argsort(order).tolist())
    return t


def _to_host(t, order=None) -> np.ndarray:
    """The tensor's elements as a host array in its own axes (bfloat16 as uint16 bits)."""
    import torch

    t = t.detach()
    if t.dtype == torch.bfloat16:
        host = t.view(torch.int16).cpu().numpy().view(np.uint16)
    else:
        host = t.cpu().numpy()
    return np.array(host)


def _storage_bytes(t) -> np.ndarray:
    """Every byte of a tensor's storage (so a write anywhere in a transposed view's storage shows)."""
    import torch

    flat = torch.as_strided(t, (t.untyped_storage().nbytes() // t.element_size(),), (1,), 0)
    return _to_host(flat).view(np.uint8)


MASKED_LOAD_NAN = ("  A masked tl.load without other= leaves the masked lanes undefined on a GPU (0 in the interpreter): "
                   "give it other=0.0, or -inf where it feeds a max.")


def _case_seed(c, i, base):
    return c.seed if not c.hidden else (base + 7919 * i) % 2**31


def run_triton_check(ex, source: str, *, include_hidden: bool = False, backend: str | None = None,
                     seed: int | None = None):
    be = backend or active_backend()
    cases = ex.cases if include_hidden else ex.visible_cases()
    first, _, rest = source.lstrip().partition("\n")
    if first.split()[:1] == ["%%triton"]:  # a whole cell pasted into a file: the magic line is not Python
        source = rest
    try:
        module, path = ts.load_module("\n" + source, ex.kernel)
    except ts.TritonUnavailable as err:
        return CheckResult(ex.id, be, [CaseResult(cases[0], False, f"case {cases[0].describe()}: not checked: {err}",
                                                  fault=True)])
    except CourseError as err:
        msg = f"the cell could not be loaded.\n  {err}\n  expected launcher: {ex.signature}"
        return CheckResult(ex.id, be, [CaseResult(cases[0], False, f"case {cases[0].describe()}: {msg}")])
    launcher = getattr(module, ex.kernel)
    base = grading_seed() if seed is None else seed
    results, stuck = [], None
    for i, c in enumerate(cases):
        if stuck is not None:
            results.append(CaseResult(c, False, f"case {c.describe(not c.hidden)}: not run: the launcher did not "
                                                f"finish case '{stuck}'", fault=True))
            continue
        res = run_case(ex, launcher, str(path), c, _case_seed(c, i, base), be)
        results.append(res)
        if ts.STOPPED in res.message and res.fault:
            stuck = c.name
    if ex.work_check is not None and all(r.passed for r in results):
        results.append(_work_result(ex, launcher, str(path), be))
    return CheckResult(ex.id, be, results)


def _call(ex, launcher, cell_file, c, seed, be):
    """Run one case; return (p, inputs, expected, got, changed) or raise."""
    p = SimpleNamespace(**c.params)
    inputs = ex.make_inputs(p, np.random.default_rng(seed))
    expected = ex.reference(p, inputs)
    dev = ts.device() if be == "gpu" else "cpu"
    views = ex.views(p) if ex.views is not None else {}
    tensors = {k: _to_torch(v, dev, views.get(k)) for k, v in inputs.items()}
    before = {k: _storage_bytes(t) for k, t in tensors.items()}
    outs = {}
    for name, spec in ex.outputs.items():
        shape, dtype = spec(p)
        outs[name] = _to_torch(poison_host(shape, dtype), dev)
    args = ex.args(p, SimpleNamespace(**tensors, **outs))
    # The interpreter runs the kernel in NumPy: log2(0) and the like would print warnings per launch
    with ts.time_limit(ex.time_limit if dev == "cpu" else None), warnings.catch_warnings(), \
            np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        launcher(*args)
        ts.synchronize()
    got = {name: _to_host(t) for name, t in outs.items()}
    changed = next((k for k, t in tensors.items() if not np.array_equal(before[k], _storage_bytes(t))), None)
    return p, inputs, expected, got, changed


def run_case(ex, launcher, cell_file: str, c, seed: int, be: str):
    shown = c.describe(with_seed=not c.hidden)
    try:
        p, inputs, expected, got, changed = _call(ex, launcher, cell_file, c, seed, be)
    except ts.LaunchTimeout as err:
        return CaseResult(c, False, f"case {shown}: {err}", fault=True)
    except CourseError as err:
        return CaseResult(c, False, f"case {shown}: {err}", fault=True)
    except Exception as err:  # noqa: BLE001  (whatever the student's launcher or kernel raised)
        if isinstance(ts.root_cause(err), ts.OutOfBounds):
            told = ts.student_traceback(err, cell_file).removeprefix(f"{ts.OutOfBounds.__name__}: ")
            return CaseResult(c, False, f"case {shown}: the kernel made {told}", fault=True)
        if ts.is_interpreter_bug(err):
            return CaseResult(c, False, f"case {shown}: not checked: Triton's CPU interpreter failed inside itself "
                                        f"({ts.root_cause(err)!r}). This is the interpreter's bug, not your kernel's; "
                                        f"run the check on a GPU ({ts.versions()}).", fault=True)
        return CaseResult(c, False, f"case {shown}: the launcher raised an error.\n  "
                                    f"{ts.student_traceback(err, cell_file)}\n  expected launcher: {ex.signature}",
                          fault=True)
    if changed:
        return CaseResult(c, False, f"case {shown}: the kernel wrote into its input {changed}. Inputs are read-only: "
                                    "keep intermediate values in registers or the outputs.")
    if ex.case_tolerance is not None:  # float32 outputs judged at the precision of the products behind them
        ex = dataclasses.replace(ex, tolerance={name: ex.case_tolerance(p) for name in ex.outputs})
    mags = magnitudes(ex, p, inputs)
    values, never = output_values(ex, p, got)
    for name in ex.outputs:
        want = np.asarray(expected[name], dtype=np.float64)
        dtype = dtype_name(ex, name, p)
        diff = compare(name, values[name], want, tolerance(ex, name, dtype, be), never[name], be, mags.get(name),
                       nan_source=MASKED_LOAD_NAN, nan_causes=ex.nan_causes)
        if diff:
            hint = (named_mistake(ex, p, inputs, values, expected, be, mags)
                    or generic_diagnosis(name, values[name], want, never[name], c.params))
            return CaseResult(c, False, f"case {shown}: {diff}" + (f"\n  Likely mistake: {hint}" if hint else ""))
    return CaseResult(c, True, shown)


def _work_result(ex, launcher, cell_file, be):
    c = next((c for c in ex.cases if c.name == ex.work_case), None) or ex.visible_cases()[0]
    shown = c.describe()
    if be != "cpu":
        return CaseResult(c, True, f"{shown}: tensor-core work not checked: tl.dot is counted by the CPU interpreter "
                                   "(GRADER_BACKEND=cpu)")
    ts.DOT_WORK.reset()
    try:
        _call(ex, launcher, cell_file, c, c.seed, be)
    except Exception as err:  # noqa: BLE001
        return CaseResult(c, False, f"case {shown}: {ts.student_traceback(err, cell_file)}", fault=True)
    why = ex.work_check(ts.DOT_WORK.macs, SimpleNamespace(**c.params))
    if why:
        return CaseResult(c, False, f"case {shown}: the values are right, but the work is not.\n  {why}")
    return CaseResult(c, True, f"{shown}: tl.dot work as required")


"""Triton kernels in the course: loading a ``%%triton`` cell, running it, and what the CPU lacks.

A Triton exercise is a Python cell that defines ``@triton.jit`` kernels and a *launcher*, a plain
function with a fixed name and signature that allocates nothing and launches the kernels on the
tensors it is given. The checks never use the notebook's objects: they write the cell's source to
a file of its own and import it as a fresh module (Triton reads a kernel's source through
``inspect``, so ``exec`` of a string would not do), once per check.

Without a CUDA GPU (or with ``GRADER_BACKEND=cpu``) the same source runs in Triton's interpreter
(``TRITON_INTERPRET=1``) on CPU tensors. The interpreter has bugs of its own; the ones the course
meets are worked around here, before any student code runs, so they are never reported as the
student's mistake:

* ``tl.dot`` on bfloat16 operands multiplies their raw bits (stored as uint16), giving values
  off by ~1e9 (seen in triton 3.8 and 3.9): the patched dot reads them as the float32 values
  they hold, which is exact;
* scalar arithmetic on a bfloat16 tensor raises ``'InterpreterBuilder' object has no attribute
  'get_bf16'`` in triton 3.8: the missing method is added;
* float32 -> bfloat16 conversions (``x.to(tl.bfloat16)``, a float32 value stored through a bfloat16
  pointer) cut the low 16 bits off, rounding towards zero (triton 3.9), where a GPU rounds to
  nearest even: a value just below 1.0 becomes 0.99609375, an error of one whole bfloat16 step. The
  patched conversion rounds to nearest even, as the GPU does;
* a scalar used as an index (``range(lo, hi, BLOCK_N)`` with ``lo`` computed in the kernel) is
  ``int()`` of a one-element array in triton 3.6, which numpy 2.4 refuses ("only 0-dimensional
  arrays can be converted to Python scalars"): the patch squeezes it first, as triton 3.8 does.

The patched dot also counts the multiply-adds it does (``DOT_WORK``), which is how a causal
kernel is graded on skipping the key blocks above the diagonal.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import signal
import sys
import threading
import traceback
from contextlib import contextmanager
from pathlib import Path

from .arrays import bf16_bits, bf16_values
from .errors import CourseError

INSTALL = "pip install -e '.[triton]'  (Triton and PyTorch; `bash .ci/setup dev` installs them)"
CELL_FILE_PREFIX = "triton_cell_"


class TritonUnavailable(CourseError):
    """Triton or PyTorch cannot be imported here."""


class InterpreterBug(CourseError):
    """Triton's CPU interpreter failed inside itself on a construct the course allows."""


class LaunchTimeout(CourseError):
    """The launcher ran past its time limit."""


class OutOfBounds(Exception):
    """A kernel in the interpreter loaded or stored outside every tensor it was passed. The
    interpreter would touch that memory for real (a store corrupts the Python process, a load
    reads garbage), so the access is stopped before it happens. Not a CourseError: the check
    reports it with the student's lines, as a fault of the kernel."""


def on_gpu() -> bool:
    """Compile for a real GPU? Only with a CUDA device and the course's GPU backend."""
    from .backend import backend

    if backend() != "gpu":
        return False
    import torch

    return torch.cuda.is_available()


def ensure_mode() -> None:
    """Choose compiled or interpreted Triton *before* any ``@triton.jit`` runs (the decorator
    reads ``TRITON_INTERPRET``)."""
    from .backend import backend

    if backend() != "gpu" and os.environ.get("TRITON_INTERPRET") != "1":
        # Triton imported before this point set itself up for compiling, and its language builtins
        # then refuse to run in the interpreter ("Cannot call @triton.jit'd outside of the scope of a
        # kernel"); it cannot be imported a second time in one process.
        _TOO_LATE[0] = "triton" in sys.modules
        os.environ["TRITON_INTERPRET"] = "1"


_TOO_LATE = [False]


def require() -> None:
    """Import triton and torch (raising :class:`TritonUnavailable` with the install command), in the
    mode this machine can run, with the interpreter's known bugs patched."""
    ensure_mode()
    try:
        import torch  # noqa: F401
        import triton  # noqa: F401
    except ImportError as err:
        raise TritonUnavailable(f"this exercise needs Triton and PyTorch ({err.name} is missing): {INSTALL}") from None
    if _TOO_LATE[0]:
        raise TritonUnavailable("Triton was imported before the course could switch it to its CPU interpreter: "
                                "restart the kernel and run the notebook's setup cell first (it imports grader, "
                                "then triton)")
    if os.environ.get("TRITON_INTERPRET") == "1":
        _patch_interpreter()


def device() -> str:
    return "cuda" if on_gpu() else "cpu"


def versions() -> str:
    import torch
    import triton

    mode = "compiled for the GPU" if on_gpu() else "interpreted on the CPU"
    return f"triton {triton.__version__}, torch {torch.__version__}, {mode}"


# --------------------------------------------------------------------------- the interpreter


class _DotWork:
    """Multiply-adds done by ``tl.dot`` in the interpreter since the last :meth:`reset`."""

    def __init__(self):
        self.macs = 0
        self.calls = 0

    def reset(self):
        self.macs = 0
        self.calls = 0


DOT_WORK = _DotWork()
_PATCHED = False


def _patch_interpreter() -> None:
    global _PATCHED
    if _PATCHED:
        return
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    original_dot = builder.create_dot

    def create_dot(self, a, b, d, *args, **kwargs):
        a_data, b_data = a.data, b.data
        DOT_WORK.calls += 1
        DOT_WORK.macs += int(a_data.shape[-2]) * int(a_data.shape[-1]) * int(b_data.shape[-1])
        if a_data.dtype == np.uint16 and a.dtype == tl.bfloat16 and b_data.dtype == np.uint16 and b.dtype == tl.bfloat16:
            out = np.matmul(bf16_values(a_data), bf16_values(b_data), dtype=np.float32)
            return interpreter.TensorHandle((out + d.data).astype(d.data.dtype), d.dtype.scalar)
        return original_dot(self, a, b, d, *args, **kwargs)

    builder.create_dot = create_dot
    original_trunc = builder.create_fp_trunc

    def create_fp_trunc(self, src, dst_type):
        if dst_type.scalar == tl.bfloat16 and src.dtype.scalar == tl.float32:
            return interpreter.TensorHandle(bf16_bits(src.data), tl.bfloat16)
        return original_trunc(self, src, dst_type)

    builder.create_fp_trunc = create_fp_trunc
    original_lang_tensor = getattr(interpreter, "_patch_lang_tensor", None)
    if original_lang_tensor is not None:  # the interpreter sets tl.tensor's dunders here on every launch
        def patch_lang_tensor(tensor, scope):
            original_lang_tensor(tensor, scope)
            scope.set_attr(tensor, "__index__", lambda self: int(np.asarray(self.handle.data).squeeze()))

        interpreter._patch_lang_tensor = patch_lang_tensor
    _patch_bf16_arithmetic(interpreter, tl)
    _patch_bounds(interpreter)
    if not hasattr(builder, "get_bf16") and hasattr(builder, "create_fp_trunc"):
        builder.get_bf16 = lambda self, value: self.create_fp_trunc(self.get_fp32(value), tl.bfloat16)
    _PATCHED = True


class _Launch(threading.local):
    """The tensors of the interpreted launch in progress: (name, first byte, end, element size, shape)."""

    def __init__(self):
        self.tensors = []


_LAUNCH = _Launch()


def _tensor_ranges(fn, args, kwargs) -> list:
    import inspect

    try:
        bound = inspect.signature(fn).bind_partial(*args, **kwargs).arguments
    except TypeError:
        bound = {f"argument {i}": a for i, a in enumerate(args)} | dict(kwargs)
    out = []
    for name, arg in bound.items():
        arg = getattr(arg, "base", arg) if not hasattr(arg, "data_ptr") else arg  # a tensor descriptor's tensor
        if hasattr(arg, "untyped_storage") and arg.device.type == "cpu":
            storage = arg.untyped_storage()
            out.append((name, storage.data_ptr(), storage.data_ptr() + storage.nbytes(), arg.element_size(),
                        tuple(arg.shape)))
    return out


def _check_access(builder, what: str, ptrs, mask, element_type) -> None:
    """Raise :class:`OutOfBounds` if an active lane of ``ptrs`` points outside every tensor argument."""
    import numpy as np

    tensors = _LAUNCH.tensors
    if not tensors:
        return
    p = np.asarray(ptrs.data).astype(np.uint64, copy=False)
    active = np.ones(p.shape, bool) if mask is None else np.broadcast_to(np.asarray(mask.data, bool), p.shape)
    size = np.uint64(max(1, getattr(element_type, "primitive_bitwidth", 8) // 8))
    inside = np.zeros(p.shape, bool)
    for _, lo, hi, _, _ in tensors:
        inside |= (p >= np.uint64(lo)) & (p + size <= np.uint64(hi))
    bad = active & ~inside
    if not bad.any():
        return
    first = int(p[bad].ravel()[0])
    name, lo, hi, item, shape = min(tensors, key=lambda t: min(abs(first - t[1]), abs(first - t[2])))
    held = (hi - lo) // item
    if first >= hi:
        where = f"at element {(first - lo) // item} of {name}, whose storage holds {held} (shape {shape})"
    else:
        where = f"{(lo - first + item - 1) // item} element(s) before the start of {name} (shape {shape})"
    program = tuple(int(v) for v in getattr(builder, "grid_idx", ()) or ())
    raise OutOfBounds(
        f"{what} outside every tensor the kernel was passed: {int(bad.sum())} of its {int(active.sum())} active lane(s)"
        + (f" in program {program}" if program else "") + f"; the first {where}. Mask the lanes past the "
        "tensor's end (mask=... < N, "
        "and other= for a load) or check the offsets and strides that reach it. Stopped before it happened: "
        "on a GPU such an access is undefined, and in the interpreter it would corrupt or read the Python "
        "process's own memory.")


def _patch_bounds(interpreter) -> None:
    """Bounds-check every load, store and atomic of an interpreted kernel against the tensors of
    its launch (a student's out-of-bounds store used to kill the notebook's kernel process)."""
    builder = interpreter.InterpreterBuilder
    executor = getattr(interpreter, "GridExecutor", None)
    if executor is None or not hasattr(executor, "_init_args_hst"):
        return
    original_init = executor._init_args_hst

    def init_args_hst(self, args_dev, kwargs):
        args_hst, kwargs_hst = original_init(self, args_dev, kwargs)
        _LAUNCH.tensors = _tensor_ranges(self.fn, args_hst, kwargs_hst)
        return args_hst, kwargs_hst

    executor._init_args_hst = init_args_hst
    original_call = executor.__call__

    def call(self, *args, **kwargs):
        try:
            return original_call(self, *args, **kwargs)
        finally:
            _LAUNCH.tensors = []

    executor.__call__ = call

    def checked(method, what, ptr_at, mask_at):
        original = getattr(builder, method, None)
        if original is None:
            return

        def run(self, *args, **kwargs):
            ptrs = args[ptr_at]
            mask = args[mask_at] if mask_at is not None and len(args) > mask_at else None
            _check_access(self, what, ptrs, mask, ptrs.get_element_ty())
            return original(self, *args, **kwargs)

        setattr(builder, method, run)

    checked("create_masked_load", "a tl.load", 0, 1)
    checked("create_masked_store", "a tl.store", 0, 2)
    checked("create_atomic_rmw", "an atomic", 1, 3)
    checked("create_atomic_cas", "an atomic", 0, None)


def _patch_bf16_arithmetic(interpreter, tl) -> None:
    """Element-wise arithmetic and reductions on bfloat16 blocks compute on their uint16 storage in the
    interpreter (``tl.sum(x * y)`` of bf16 blocks gave -4e8 for 3.0 in triton 3.9): compute on the
    float32 values and round back to bfloat16 (to nearest even), as the GPU does."""
    import numpy as np

    handle = interpreter.TensorHandle
    builder = interpreter.InterpreterBuilder

    def bf16(h):
        return h.dtype.scalar == tl.bfloat16 and h.data.dtype == np.uint16

    def back(h):
        return handle(bf16_bits(h.data), tl.bfloat16) if h.data.dtype == np.float32 else h

    binary, unary = builder.binary_op, builder.unary_op

    def binary_op(self, lhs, rhs, op):
        if bf16(lhs) and bf16(rhs):
            return back(binary(self, handle(bf16_values(lhs.data), tl.float32),
                               handle(bf16_values(rhs.data), tl.float32), op))
        return binary(self, lhs, rhs, op)

    def unary_op(self, arg, op):
        if bf16(arg):
            return back(unary(self, handle(bf16_values(arg.data), tl.float32), op))
        return unary(self, arg, op)

    builder.binary_op, builder.unary_op = binary_op, unary_op
    reduce_ops = getattr(interpreter, "ReduceOps", None)
    if reduce_ops is None or not hasattr(reduce_ops, "sum"):
        return
    total, extreme = reduce_ops.sum, reduce_ops.min_max

    def values(t):  # a bf16 block as float32 values, or None
        h = t.handle
        return bf16_values(h.data) if bf16(h) else None

    def sum_(self, input):
        v = values(input)
        if v is None:
            return total(self, input)
        out = np.asarray(np.sum(v, axis=self.axis, keepdims=self.keep_dims), np.float32)
        return self.to_tensor(bf16_bits(out), input.dtype)

    def min_max(self, input, val_reduce_op, idx_reduce_op=None):
        input = input[0] if isinstance(input, tuple) else input
        v = values(input)
        if v is None:
            return extreme(self, input, val_reduce_op, idx_reduce_op)
        val = idx = None
        if val_reduce_op:
            out = np.asarray(val_reduce_op(v, axis=self.axis, keepdims=self.keep_dims), np.float32)
            val = self.to_tensor(bf16_bits(out), input.dtype)
        if idx_reduce_op:
            idx = self.to_tensor(idx_reduce_op(v, axis=self.axis, keepdims=self.keep_dims), tl.int32)
        if val is not None and idx is not None:
            return val, idx
        return val if val is not None else idx

    reduce_ops.sum, reduce_ops.min_max = sum_, min_max


def root_cause(err: BaseException) -> BaseException:
    """The interpreter wraps what a kernel raised in an ``InterpreterError``: the original."""
    seen = 0
    while err.__cause__ is not None and seen < 8 and type(err).__name__ == "InterpreterError":
        err, seen = err.__cause__, seen + 1
    return err


def is_interpreter_bug(err: BaseException) -> bool:
    """Raised inside Triton's interpreter for want of a builder method (its bug, not the kernel's)."""
    err = root_cause(err)
    frames = traceback.extract_tb(err.__traceback__)
    inside = bool(frames) and "triton/runtime/interpreter" in frames[-1].filename.replace("\\", "/")
    return inside and isinstance(err, AttributeError) and "InterpreterBuilder" in str(err)


REMOVED_API = {
    "Block pointers have been removed": "tl.make_block_ptr was removed in triton 3.9: load tiles with "
    "tl.make_tensor_descriptor (desc.load([row, col])) or with pointer arithmetic and masks",
}


# --------------------------------------------------------------------------- loading a cell


def cache_dir() -> Path:
    import tempfile

    base = os.environ.get("GRADER_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "flash-course")
    for candidate in (Path(base) / "triton_cells", Path(tempfile.gettempdir()) / f"triton_cells_{os.getuid()}"):
        try:  # the clean regrade's sandbox mounts the course cache read-only: its /tmp is private
            candidate.mkdir(parents=True, exist_ok=True)
            if os.access(candidate, os.W_OK):
                return candidate
        except OSError:
            continue
    raise CourseError(f"no writable folder for Triton cells (tried {base} and {tempfile.gettempdir()})")


class TritonProgram:
    """A ``%%triton NAME`` cell: its source and, once loaded, the launcher ``NAME`` it defines.
    Calling it calls the launcher. ``source`` is what the checks re-load from."""

    def __init__(self, source: str, name: str):
        self.source = source
        self.name = name
        self.module = None
        self.path = None

    def load(self) -> "TritonProgram":
        # "\n": the %%triton line is line 1, so error line numbers match the editor's
        self.module, self.path = load_module("\n" + self.source, self.name)
        return self

    @property
    def launcher(self):
        if self.module is None:
            self.load()
        return getattr(self.module, self.name)

    def __call__(self, *args, **kwargs):
        return self.launcher(*args, **kwargs)

    def __repr__(self):
        return f"<Triton cell {self.name!r}: {len(self.source.splitlines())} lines>"


_LOADS = [0]


def load_module(source: str, name: str):
    """Import ``source`` as a new module (a fresh namespace every call); return (module, path).
    Line numbers in errors are the cell's own (the first line of ``source`` is the magic's)."""
    require()
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    _LOADS[0] += 1
    mod_name = f"_{CELL_FILE_PREFIX}{digest}_{os.getpid()}_{_LOADS[0]}"
    path = cache_dir() / f"{CELL_FILE_PREFIX}{digest}.py"
    if not path.exists() or path.read_text() != source:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(source)
        os.replace(tmp, path)
    spec = importlib.util.spec_from_file_location(mod_name, path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as err:
        raise CourseError(f"the cell is not valid Python: line {err.lineno}: {err.msg}\n    {(err.text or '').rstrip()}") from None
    except Exception as err:  # noqa: BLE001  (any error in the student's top-level code)
        raise CourseError(f"the cell failed while defining its kernels: {student_traceback(err, str(path))}") from None
    fn = getattr(module, name, None)
    if not callable(fn):
        raise CourseError(f"the cell defines no function named {name!r}: the launcher must be a plain Python function "
                          f"called {name} (the name on the %%triton line)")
    return module, path


def student_traceback(err: BaseException, cell_file: str) -> str:
    """``Type: message`` and the student's own lines (``line N: code``) in the traceback."""
    err = root_cause(err)
    lines = [f"{type(err).__name__}: {err}"]
    for text, why in REMOVED_API.items():
        if text in str(err):
            lines.append(f"    ({why})")
    for fr in traceback.extract_tb(err.__traceback__):
        if fr.filename == cell_file:
            lines.append(f"    line {fr.lineno}: {(fr.line or '').strip()}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- a time limit


@contextmanager
def time_limit(seconds: float | None):
    """Raise :class:`LaunchTimeout` in the launcher after ``seconds`` of this process's CPU time
    (its own work: a busy machine slows it without failing it), or WALL_CAP_FACTOR times that on
    the clock (main thread only: the interpreter runs Python, so a signal interrupts a kernel's
    endless loop)."""
    if not seconds or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return
    from .emulator import WALL_CAP_FACTOR

    cap = seconds * WALL_CAP_FACTOR

    def on_signal(signum, frame):
        if signum == signal.SIGPROF:
            raise LaunchTimeout(f"{STOPPED} {seconds:g} s of CPU time, its time limit (an endless loop? a far too "
                                "large grid?)")
        raise LaunchTimeout(f"{STOPPED} {cap:g} s on the clock, its wall-clock cap (blocked, or the machine "
                            "overloaded?)")

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGPROF, signal.SIGALRM)}
    signal.setitimer(signal.ITIMER_PROF, seconds)
    signal.setitimer(signal.ITIMER_REAL, cap)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.setitimer(signal.ITIMER_REAL, 0)
        for s, handler in old.items():
            signal.signal(s, handler)


STOPPED = "the launch was stopped after"  # how a time limit's message starts


def synchronize() -> None:
    if "torch" in sys.modules and on_gpu():
        import torch

        torch.cuda.synchronize()

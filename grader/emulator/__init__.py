"""CPU emulator: run the course's CUDA C kernels, unchanged, on a machine without a GPU.

g++ compiles the kernel source together with a small runtime header into a shared library; a
persistent worker process (``src/launcher.cpp``) loads it and runs each CUDA thread of a block
as a fiber (Boost.Context, or ucontext without Boost). A fiber runs until it reaches
``__syncthreads()`` or a warp collective, then the next one runs: one legal CUDA schedule, and
a deterministic one. Blocks are spread over the CPU cores. Kernels never run in the Python
process, so a crash or an endless loop costs only the worker, which is restarted.

What it checks, with messages that name the kernel, block, thread, array and source line:
out-of-bounds global accesses (arrays sit against PROT_NONE guard pages), shared and local
array overruns (``-fsanitize=bounds``), dynamic shared memory overruns, divergent
``__syncthreads()`` and warp collectives some lanes never reach, the time limit (CPU seconds
the worker spends on the launch, all its threads: ``time_limit`` or ``GRADER_TIME_LIMIT``, default
20; a busy machine slows a kernel down but adds no CPU time, while a spinning fiber burns it, so
an endless loop is still stopped at once; a wall-clock cap of WALL_CAP_FACTOR times the limit
stops a kernel blocked without using the CPU), ``assert``/``__trap()``, stack
overflow, integer division by zero, and (``race_check=True``) results that change under a
second legal schedule: threads and blocks in reverse order, and a deterministic race detector,
see below. Shared memory starts as 0xFF bytes
(NaN as float) in every block, so reading what no thread wrote shows up. ``count_io=True``
counts global bytes per array and shared bytes, through clang's load/store tracing (clang-16).
``profile=True`` (same tracing) counts, per source line, warp requests, global 32-byte sectors
and shared-memory wavefronts (coalescing and bank conflicts, see ``profile.py``).

Honest limits:

* It does not model speed: no timing, caches, occupancy or register limits; ``profile=True``
  counts requests, sectors and wavefronts, not time. ``LaunchReport.seconds`` is the CPU's time.
* Numerics follow the CPU: no FMA contraction where the GPU would fuse, and fast intrinsics
  (``__expf``, ``__fdividef``, ...) return accurate values. Compare with tolerances.
* Memory model: one legal schedule (two with ``race_check``), not every interleaving. Warps do
  not run in lockstep: code that relies on implicit warp synchronicity without ``__syncwarp``
  may pass here and fail on a GPU.
* ``race_check=True`` (needs clang-16 for the detector; without it only the comparison below)
  reruns the launch, threads and blocks in reverse order, as the clang build whose loads and
  stores are traced, every block on one CPU thread (deterministic). A shadow per 4-byte word of
  the arrays and of shared memory keeps the last plain write, two reads and two atomics, each
  with block, thread, barrier epoch (``__syncthreads`` passed) and warp collectives passed.
  Reported: two threads touching one word, at least one with a plain write (or an atomic
  against a plain write), unless ordered: same block and a ``__syncthreads`` between them, or
  same warp and a ``__syncwarp``/shuffle both took part in. Blocks are never ordered. Not
  reported: atomics among themselves, and a plain read against atomics (the atomicCAS loop
  idiom reads the old value plainly). Misses: accesses the compiler turns into ``memcpy``
  calls are not traced, and sub-word (1-, 2-byte) accesses or more than two concurrent readers
  of a word keep only part of the history; ordering through atomics or fences (locks, flags) is
  not modelled, so a lock-protected update would be reported. The outputs of the two runs are
  also compared (floats with a relative tolerance of 1e-4, as atomics add in another order),
  which catches what the detector misses when it changes the results.
* Out-of-bounds reads just *before* an array are caught when its size is a multiple of 4 KiB or
  with ``race_check=True`` (its second run places arrays the other way round); writes there are
  always caught. Each array has 64 KiB of unmapped memory on either side: an index that jumps
  further than that can land in another array unnoticed.
* ``__shared__`` variables live in the worker's thread-local storage; a kernel's static shared
  size is what g++ allocates after optimisation (unused arrays vanish), counted per kernel plus
  every shared variable outside a kernel.
* ``__activemask()`` returns the warp's lanes that have not exited, not the converged subset.
"""
from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from ..device import H100_SXM
from ..errors import (
    BackendUnavailableError,
    BarrierError,
    CompileError,
    KernelAssertionError,
    KernelFault,
    KernelRuntimeError,
    KernelTimeoutError,
    LaunchConfigError,
    OutOfBoundsError,
    RaceConditionError,
)
from ..signature import Signature
from ..source import format_compile_log, student_code, translation_unit
from . import _toolchain, _worker
from ._build import CompilerFault, Library, build
from ._toolchain import available, boost_available, clang, compiler_id, fiber_backend, gxx  # noqa: F401  (doctor, checks)
from .profile import Profile, build_profile

__all__ = [
    "EmulatedKernel", "IOCounts", "LaunchReport", "Profile", "available", "compile_kernel", "fiber_backend",
    "translation_unit", "shutdown",
]

# What a race check without the clang build says instead of guessing at the cause.
RACE_DETECTOR_MISSING = (
    "race check unavailable: install clang-16 (apt-get install clang-16), whose traced build "
    "runs the race detector that names the two threads and their lines."
)
STATIC_SHARED_LIMIT = H100_SXM.static_shared_per_block
SHARED_LIMIT = H100_SXM.max_shared_per_block_optin
DEFAULT_TIME_LIMIT = 20.0  # CPU seconds of one launch
WALL_CAP_FACTOR = 20  # a launch's wall-clock cap, in multiples of its CPU limit: a machine 20 times oversubscribed


@dataclass(frozen=True)
class IOCounts:
    """Bytes one launch moved. ``per_array`` maps each array argument's name to
    (bytes read, bytes written); atomics count as a read and a write."""

    global_read: int
    global_written: int
    shared_read: int
    shared_written: int
    per_array: dict = field(default_factory=dict)


@dataclass
class LaunchReport:
    printed: str
    io: IOCounts | None
    seconds: float  # on the clock, as the caller waited
    cpu_seconds: float = 0.0  # the worker's CPU time (every run of the launch, all threads): what the limit counts
    profile: Profile | None = None  # with profile=True: memory requests per source line


def compile_kernel(source: str, name: str, signature: Signature, options: tuple[str, ...] = ()) -> "EmulatedKernel":
    """Compile ``source`` (a translation unit, see ``translation_unit``) for the CPU."""
    try:
        lib = build(source, options)
    except CompilerFault as e:
        raise CompileError(f"{name}: {e}") from None
    except CompileError as e:
        diagnostics = str(e)
        message = format_compile_log(diagnostics, student_code(source), name, "g++")
        # Errors raised inside the runtime's templates (a static_assert, say) carry no student
        # line; the student's line appears as "required from here" above, so add their text.
        unplaced = [ln for ln in diagnostics.splitlines() if ln.startswith(("error:", "fatal error:"))]
        if unplaced and diagnostics not in message:
            message += "\n" + "\n".join(f"  {ln}" for ln in unplaced)
        raise CompileError(message) from None
    return EmulatedKernel(name, signature, source, tuple(options), lib)


# One lock for all launches: the worker processes are shared, and signal handling in them
# assumes one launch at a time.
_LOCK = threading.RLock()
_WORKERS: dict[str, _worker.Worker] = {}


def _get_worker(backend: str) -> _worker.Worker:
    w = _WORKERS.get(backend)
    if w is None or not w.alive():
        if w is not None:
            w.close()
        w = _worker.Worker(backend)
        _WORKERS[backend] = w
    return w


def _drop_worker(backend: str) -> None:
    w = _WORKERS.pop(backend, None)
    if w is not None:
        w.close()


def shutdown() -> None:
    """Stop the worker processes (they also die with this process)."""
    with _LOCK:
        for backend in list(_WORKERS):
            _drop_worker(backend)


def _time_limit(value: float | None) -> float:
    if value is not None:
        return float(value)
    return float(os.environ.get("GRADER_TIME_LIMIT", DEFAULT_TIME_LIMIT))


# Kernels that use vector types, cp.async, ldmatrix or WMMA assume that an array starts at an
# aligned address, as cudaMalloc's do. Their arrays start at multiples of ARRAY_ALIGN bytes (the
# largest alignment a primitive needs: WMMA's 256 bits); other kernels' arrays end right at a guard
# page, so that reading one element past the end faults.
ARRAY_ALIGN = 32
PROFILE_ALIGN = 256  # profile=True: cudaMalloc's alignment, so sectors fall as on a GPU
_ALIGNMENT_SENSITIVE = re.compile(
    r"\b(?:u?(?:char|short|int|long|longlong)[234]|float[234]|double[234]|__half2|half2|__nv_bfloat162|"
    r"nv_bfloat162|reinterpret_cast|cp_async\w*|__pipeline_memcpy_async|ldmatrix\w*|wmma|__ldg)\b|cp\.async")


def alignment_sensitive(source: str) -> bool:
    return bool(_ALIGNMENT_SENSITIVE.search(student_code(source)))


_CP_ASYNC = re.compile(r"\b(?:cp_async\w*|__pipeline_memcpy_async|memcpy_async)\b|cp\.async")


def _needs_traced_build(source: str) -> bool:
    """Whether launches should use the traced (clang) build even without count_io: with cp.async,
    a read of a copy still in flight shows up in the normal build only as its 0xFF poison (NaN)
    in the results, while the traced build stops at the read and names it, the copy and the wait."""
    return bool(_CP_ASYNC.search(student_code(source)))


class EmulatedKernel:
    def __init__(self, name: str, signature: Signature, source: str, options: tuple, lib: Library):
        self.name = name
        self.signature = signature
        self._source = source
        self._options = options
        self._lib = lib
        self._io_lib: Library | None = None
        self._aligned = alignment_sensitive(source)
        self.static_shared_bytes = int(lib.static_shared.get(name, 0))

    def __repr__(self) -> str:
        return f"<EmulatedKernel {self.name}>"

    # ------------------------------------------------------------------ launch

    def launch(self, grid, block, args, shared_mem, *, time_limit=None, race_check=False, count_io=False,
               profile=False) -> LaunchReport:
        grid, block = tuple(int(v) for v in grid), tuple(int(v) for v in block)
        shared_mem = int(shared_mem or 0)
        self._check_shared(shared_mem)
        limit = _time_limit(time_limit)
        lib = self._lib
        if profile and _toolchain.clang() is None:
            raise BackendUnavailableError(
                f"{self.name}: the memory profiler (profile=True) needs clang 16 or newer, whose load/store "
                "tracing it is built on: apt-get install clang-16"
            )
        if count_io or profile:
            if self._io_lib is None:
                self._io_lib = build(self._source, self._options, flavor="io")
            lib = self._io_lib
        elif _needs_traced_build(self._source):
            lib = self._race_lib() or lib
        start = time.perf_counter()
        with _LOCK:
            backend = fiber_backend()
            first, io, printed, sites, cpu = self._run(backend, lib, grid, block, shared_mem, args, limit, reverse=False,
                                                  align_start=False, count_io=count_io, profile=profile)
            if race_check:
                # The second run is the clang build under the race detector (when clang is
                # here), in the other schedule: a race it sees is reported with both threads and
                # lines; one it cannot see may still change the results, which are compared.
                race_lib = self._race_lib()
                second, _, _, _, cpu2 = self._run(backend, race_lib or lib, grid, block, shared_mem, args, limit,
                                                  reverse=True, align_start=True, count_io=False,
                                                  race=race_lib is not None)
                cpu += cpu2
                self._compare(args, first, second, detector=race_lib is not None)
            for i, data in first.items():
                args[i].reshape(-1).view(np.uint8)[:] = data
        prof = build_profile(self.name, lib.path, lib.source_lines, sites) if profile else None
        return LaunchReport(printed=printed, io=io, seconds=time.perf_counter() - start, profile=prof,
                            cpu_seconds=cpu)

    def _race_lib(self) -> Library | None:
        """The traced (clang) build the race detector needs, or None without clang."""
        if _toolchain.clang() is None:
            return None
        if self._io_lib is None:
            try:
                self._io_lib = build(self._source, self._options, flavor="io")
            except CompileError:
                return None  # code g++ takes but clang refuses: the comparison alone must do
        return self._io_lib

    def _check_shared(self, dynamic: int) -> None:
        static = self.static_shared_bytes
        if static > STATIC_SHARED_LIMIT:
            raise LaunchConfigError(
                f"{self.name}: its static __shared__ arrays take {static} bytes, over the GPU's "
                f"{STATIC_SHARED_LIMIT} byte limit for static shared memory. Use smaller tiles, or "
                "extern __shared__ (dynamic) memory with a shared_mem launch argument."
            )
        if static + dynamic > SHARED_LIMIT:
            raise LaunchConfigError(
                f"{self.name}: {static} bytes of static plus {dynamic} bytes of dynamic shared memory "
                f"exceed the {SHARED_LIMIT} bytes (227 KiB) a block can have on an H100."
            )

    def _run(self, backend, lib, grid, block, shared_mem, args, limit, *, reverse, align_start, count_io, race=False,
             profile=False):
        """One run in the worker: (outputs as arg index -> raw bytes, IOCounts or None, printed,
        profile sites, CPU seconds)."""
        try:
            worker = _get_worker(backend)
            lib_id = worker.load(str(lib.path))
            # Sectors depend on where an array starts: the profiler's arrays start as cudaMalloc's do.
            align = PROFILE_ALIGN if profile else ARRAY_ALIGN if self._aligned else 1
            slots = worker.layout(args, align_start=align_start, align=align)
            worker.fill(slots, args)
            outcome = worker.run(lib_id, f"emu_entry_{self.name}", grid, block, shared_mem, args, slots,
                                 reverse=reverse, count_io=count_io, time_limit=limit,
                                 wall_cap=limit * WALL_CAP_FACTOR, race=race,
                                 profile=profile)
        except _worker.WorkerDied as e:
            _drop_worker(backend)
            raise KernelRuntimeError(
                f"{self.name}: the kernel crashed the emulator's worker process ({e}). "
                "The next launch starts a fresh worker."
            ) from None
        except BaseException:
            # Interrupted (Ctrl-C in Jupyter) while the kernel ran: its reply would confuse the
            # next launch, so that worker goes.
            _drop_worker(backend)
            raise
        if not outcome.ok:
            _drop_worker(backend)
            raise self._explain(outcome, lib, args, slots, limit)
        for s in slots:
            if worker.canary_damaged(s) and not align_start:
                # Something wrote just before an array. Run again with every array right after a
                # guard page: the write then faults and is reported with thread and line.
                self._run(backend, lib, grid, block, shared_mem, args, limit, reverse=reverse,
                          align_start=True, count_io=False)
                p = self.signature.params[s.index]
                raise OutOfBoundsError(f"{self.name}: the kernel wrote before the start of {p.name} (index < 0).",
                                       kernel=self.name)
            if worker.canary_after_damaged(s):
                p = self.signature.params[s.index]
                raise OutOfBoundsError(
                    f"{self.name}: the kernel wrote past the end of {p.name} (within the {ARRAY_ALIGN} bytes after "
                    f"its last element). Check the tail: the last vector or tile must stop at the array's end.",
                    kernel=self.name)
        # Const arrays come back too: a kernel that writes into an input through a cast pointer
        # must show it (on a GPU the write lands in the caller's array), not have it dropped here.
        outputs = {s.index: worker.view(s).copy() for s in slots}
        io = None
        if count_io:
            io = self._io_counts(outcome.io, args)
        return outputs, io, outcome.printed, outcome.profile, outcome.cpu_seconds

    def _io_counts(self, numbers, args) -> IOCounts:
        shared_read, shared_written = numbers[0], numbers[1]
        per = {}
        for i, p in enumerate(self.signature.params):
            if isinstance(args[i], np.ndarray):
                per[p.name] = (numbers[2 + 2 * i], numbers[3 + 2 * i])
        # After the parameters, the arrays of the tensor maps (grader.TensorMap), in their order.
        maps = [p.name for p in self.signature.params if p.ctype == "CUtensorMap"]
        for k, i in enumerate(range(len(self.signature.params), len(args))):
            per[f"{maps[k]}'s tensor" if k < len(maps) else f"argument {i}"] = (numbers[2 + 2 * i], numbers[3 + 2 * i])
        return IOCounts(sum(r for r, _ in per.values()), sum(w for _, w in per.values()),
                        shared_read, shared_written, per)

    # ------------------------------------------------------------------ race check

    def _compare(self, args, first: dict, second: dict, detector: bool = True) -> None:
        for i, a_bytes in first.items():
            b_bytes = second[i]
            if np.array_equal(a_bytes, b_bytes):
                continue
            p = self.signature.params[i]
            arr = args[i]
            a, b = _as_values(a_bytes, arr, p.dtype), _as_values(b_bytes, arr, p.dtype)
            if a.dtype.kind == "f":
                scale = float(np.nanmax(np.abs(a))) if np.isfinite(a).any() else 1.0
                same = np.isclose(a, b, rtol=1e-4, atol=1e-6 * max(scale, 1e-30)) | (np.isnan(a) & np.isnan(b))
            else:
                same = a == b
            if same.all():
                continue
            k = int(np.flatnonzero(~same)[0])
            where = f"{p.name}[{k}]"
            if arr.ndim > 1:
                where += f" (index {tuple(int(v) for v in np.unravel_index(k, arr.shape))} of shape {arr.shape})"
            differ = (f"{where} is {a[k]!r} in one and {b[k]!r} in the other "
                      f"({int((~same).sum())} of {same.size} elements differ)")
            if not detector:
                # Without the detector nothing tells a missing __syncthreads() from two threads
                # (or blocks) writing one element, e.g. an index that leaves out the head: say
                # what was seen and what is missing, and do not guess.
                err = RaceConditionError(
                    f"{self.name}: two legal schedules of the same launch (threads and blocks in the "
                    f"opposite order) give different results: {differ}. Some accesses are not ordered: "
                    "two threads or blocks write the same element, or one reads what another writes. "
                    + (RACE_DETECTOR_MISSING if _toolchain.clang() is None else
                       "The race detector could not run: clang rejected this kernel (g++ took it)."),
                    kernel=self.name,
                )
                err.explained = True
                raise err
            raise RaceConditionError(
                f"{self.name}: race condition. Two legal schedules of the same launch (threads and blocks "
                f"run in the opposite order) give different results: {differ}.\n"
                "Some thread reads memory that another thread writes with no __syncthreads() (or atomic) "
                "in between: typically a shared-memory tile overwritten for the next iteration while other "
                "threads still read the current one. Put a __syncthreads() after the loads and another "
                "before the tile is overwritten.",
                kernel=self.name,
            )

    # ------------------------------------------------------------------ errors

    def _explain(self, o: _worker.Outcome, lib: Library, args, slots, limit) -> Exception:
        if o.kind == _worker.RACE:
            return self._explain_race(o, lib, args)
        line = o.line
        if line is None and o.pc and o.kind != _worker.ASSERT:
            line = _source_line(lib.path, o.pc - o.lib_base)
        who = _who(o)
        at = self._at(line, lib, _calling_lines(o, lib, line))
        printed = ""
        if o.printed.strip():
            tail = o.printed[-2000:]
            printed = f"\nThe kernel printed before it stopped:\n{tail.rstrip()}"
        fault = dict(kernel=self.name, block=o.block, thread=o.thread, line=line)
        k = o.kind
        if k == _worker.SEGV:
            return OutOfBoundsError(f"{self.name}: {who} {self._describe_access(o, args, slots)}{at}.{printed}", **fault)
        if k == _worker.SHARED_OOB:
            size, offset = (int(v) for v in o.text.split())
            verb = "wrote" if o.is_write else "read"
            if size == 0:
                msg = (f"{who} {verb} dynamic shared memory (extern __shared__) but the launch gave it 0 bytes: "
                       "pass the size in bytes as shared_mem")
            else:
                msg = (f"{who} {verb} byte {offset} of the dynamic shared memory (extern __shared__), "
                       f"which has {size} bytes (shared_mem={size})")
            return OutOfBoundsError(f"{self.name}: {msg}{at}.{printed}", **fault)
        if k == _worker.BOUNDS:
            detail = f" ({o.text})" if o.text else ""
            return OutOfBoundsError(
                f"{self.name}: {who} indexed a __shared__ or local array past its declared size{detail}{at}. "
                f"Check the index against the array's dimensions.{printed}", **fault)
        if k == _worker.USAGE:
            return KernelFault(f"{self.name}: {who}: {_with_copy_calls(o, lib)}{at}.{printed}", **fault)
        if k == _worker.STACK:
            return KernelFault(
                f"{self.name}: {who} overflowed its 256 KiB stack{at}: local arrays too large or "
                f"recursion too deep.{printed}", **fault)
        if k == _worker.FPE:
            return KernelFault(f"{self.name}: {who} divided an integer by zero{at}.{printed}", **fault)
        if k == _worker.ASSERT:
            return KernelAssertionError(
                f"{self.name}: assertion `{o.text}` failed in {who}{at}.{printed}", **fault)
        if k == _worker.TRAP:
            return KernelAssertionError(f"{self.name}: {who} called __trap(){at}.{printed}", **fault)
        if k == _worker.BARRIER:
            block = f" in block {_xyz(o.block)}" if o.block else ""
            return BarrierError(f"{self.name}{block}: {o.text}{printed}", **fault)
        if k == _worker.TIMEOUT:
            where = f" {who[0].upper()}{who[1:]} was running{at}." if o.block else ""
            return KernelTimeoutError(f"{self.name}: {_stopped(o.text)}{where} If the kernel is just slow, raise "
                                      f"time_limit (or GRADER_TIME_LIMIT).{printed}", **fault)
        if k == _worker.BUS:
            return OutOfBoundsError(f"{self.name}: {who} made a misaligned or invalid memory access{at}.{printed}", **fault)
        return KernelRuntimeError(f"{self.name}: {who} failed: {o.text or 'unknown error'}{at}.{printed}")

    def _explain_race(self, o: _worker.Outcome, lib: Library, args) -> Exception:
        f = o.text.split()
        space, off, kind_now, kind_before = int(f[0]), int(f[1]), int(f[2]), int(f[3])
        block_before, thread_before = tuple(int(v) for v in f[4:7]), tuple(int(v) for v in f[7:10])
        pc_before, same_block, same_warp, size = int(f[10]), f[11] == "1", f[12] == "1", int(f[13])
        named = len(f) > 14 and f[14] == "1"  # the block used named barriers
        line_now = _source_line(lib.path, o.pc - o.lib_base - 1)
        line_before = _source_line(lib.path, pc_before - 1)
        now = (o.block, o.thread, kind_now, line_now)
        before = (block_before, thread_before, kind_before, line_before)
        # Name them in block, then thread order (z, y, x), whichever ran first here.
        order = sorted([before, now], key=lambda a: (a[0][::-1], a[1][::-1]))
        verbs = {0: "reads", 1: "writes", 2: "atomically updates"}
        what = self._race_where(space, off, size, args, lib)
        parts = [f"thread {_xyz(t)} of block {_xyz(b)} {verbs[k]} it{self._at(ln, lib)}" for b, t, k, ln in order]
        kinds = {kind_now, kind_before}
        same_line = line_now is not None and line_now == line_before
        if kinds == {1}:
            kind = "write-write race"
        elif 2 in kinds:
            kind = "race between an atomic and a plain write"
        else:
            kind = "read-write race"
        accumulate = 2 in kinds or kinds == {1} or (same_line and kinds == {0, 1})
        msg = f"{self.name}: race condition on {what}: {parts[0]}, and {parts[1]}, with nothing ordering the two"
        if not same_block:
            msg += " (threads of different blocks are never ordered within a launch: no __syncthreads() spans blocks)"
        elif accumulate:
            pass
        elif same_warp:
            msg += " (same block and warp, with no __syncthreads(), __syncwarp() or warp collective between them)"
        elif named:
            msg += (" (same block, with no __syncthreads() between them, and no named barrier phase that the first "
                    "thread arrived at after its access and the second waited at before its own)")
        else:
            msg += " (same block, with no __syncthreads() between them)"
        msg += f". This is a {kind}"
        array = what.split("[")[0] if space >= 0 else None
        add = f"atomicAdd(&{array}[i], x)" if array else "atomicAdd"
        if 2 in kinds:
            msg += (f". Every update of an element that several threads change at once must be atomic: use {add} "
                    "for all of them, or make one thread own each element.")
        elif kinds == {1} and same_line:
            # Two plain stores from one line: nothing is being summed, so the element was meant to have
            # one owner and the index maps two threads to it.
            msg += (": several threads store to the same element from one line. A plain store means each element "
                    "has one owner, so the index maps two threads to one element: check how each thread's row and "
                    "column are computed (in a tensor-core kernel, the lane -> row and column of the fragment: "
                    "rows g and g + 8 with g = lane / 4, columns from t = lane % 4). Where a group of lanes holds "
                    "the same value after a reduction (a quad's row max or sum), let one lane store it "
                    f"(if (t == 0)). Only an element meant to sum several threads' values needs {add}.")
        elif accumulate:
            rmw = " (a read-modify-write like +=)" if kinds == {0, 1} else ""
            msg += (f": several threads update the same element{rmw} at once, so updates get lost. "
                    f"Use {add}, or make one thread own each element.")
            if same_block and not same_line:
                msg += " If the two writes belong to different steps, a __syncthreads() is missing between them."
        elif not same_block:
            msg += (": one block reads what another block writes, in no fixed order. Make one block own the "
                    "element, or move the second step into a separate kernel launch.")
        elif same_warp:
            msg += (": a __syncthreads() is missing between these two accesses (or a __syncwarp(), where only "
                    "the lanes of one warp share this data).")
        elif named:
            msg += (": a barrier is missing between these two accesses. With warps in roles, a buffer changes hands "
                    "through named barriers: the writer arrives (named_barrier_arrive) after it has written and the "
                    "reader waits (named_barrier_sync) at that barrier before it reads; before it overwrites the "
                    "buffer, the writer waits at the barrier the readers arrive at when they are done with it.")
        else:
            msg += (": a __syncthreads() is missing between these two accesses (typically a shared tile "
                    "overwritten for the next iteration while other threads still read it, or read before "
                    "every thread has written it).")
        landing = [ln for b, t, k, ln in order if k == 1 and ln and 1 <= ln <= len(lib.source_lines)
                   and "cp_async_wait" in lib.source_lines[ln - 1]]
        if landing:
            retires_all = re.search(r"cp_async_wait(<0>|_all)", lib.source_lines[landing[0] - 1])
            msg += (f" The write on line {landing[0]} is a cp.async copy landing: a copy counts as written only at the "
                    "cp_async_wait that retires its group, so "
                    + ("the copying thread must reach that wait before it hands the buffer over (wait, then arrive or "
                       "synchronise)." if retires_all else "that wait must retire it (a smaller N, or cp_async_wait<0>) "
                       "before the copying thread hands the buffer over."))
        err = RaceConditionError(msg, kernel=self.name, block=o.block, thread=o.thread, line=line_now)
        err.explained = True
        return err

    def _race_where(self, space: int, off: int, size: int, args, lib: Library) -> str:
        if space >= 0:
            p = self.signature.params[space]
            arr = args[space]
            item = arr.itemsize or 1
            k = off // item
            where = f"{p.name}[{k}]"
            if arr.ndim > 1 and 0 <= k < arr.size:
                where += f" (index {tuple(int(v) for v in np.unravel_index(k, arr.shape))} of shape {arr.shape})"
            return where
        elem = size if size in (1, 2, 4, 8) else 4
        if space == -1:
            name, start = _shared_symbol(lib.path, off)
            if name:
                return f"shared memory ({name}, flat element {(off - start) // elem} of {elem}-byte elements)"
            return f"shared memory (byte {off} of the __shared__ variables)"
        if space == -2:
            return f"shared memory (extern __shared__, flat element {off // elem} of {elem}-byte elements)"
        return "global memory outside the array arguments"

    def _at(self, line: int | None, lib: Library, calls: tuple[int, ...] = ()) -> str:
        if line is None:
            return ""
        return " (" + ", ".join([_quoted(lib, line), *(f"called from {_quoted(lib, n)}" for n in calls)]) + ")"

    def _describe_access(self, o: _worker.Outcome, args, slots) -> str:
        verb = "wrote" if o.is_write else "read"
        if o.addr < 65536:
            return f"{verb} through a null (or nearly null) pointer, address {o.addr:#x}"
        starts = _worker.worker_starts(slots, o.arena_base)
        best = None
        for s in slots:
            lo = starts[s.index]
            hi = lo + s.nbytes
            dist = lo - o.addr if o.addr < lo else max(0, o.addr - hi + 1)
            if best is None or dist < best[0]:
                best = (dist, s, lo)
        if best is None:
            return f"{verb} address {o.addr:#x}, which is in no array argument"
        dist, s, lo = best
        p = self.signature.params[s.index]
        arr = args[s.index]
        item = arr.itemsize or 1
        index = (o.addr - lo) // item
        shape = f" (shape {arr.shape})" if arr.ndim > 1 else ""
        if dist > (1 << 20):
            return (f"{verb} address {o.addr:#x}, which is in no array (the nearest, {p.name}, has {arr.size} "
                    f"elements; this would be index {index}): a pointer or index is far off")
        side = "before its start" if index < 0 else "past its end"
        return f"{verb} {p.name}[{index}] but {p.name} has {arr.size} elements{shape}, so that is {side}"


def _stopped(record: str) -> str:
    """What a timeout record ("cpu_limit wall_cap cpu wall", see report.cpp) says happened."""
    cpu_limit, wall_cap, cpu, wall = (float(v) for v in record.split())
    if cpu >= cpu_limit:
        return (f"stopped after {cpu:.1f} s of CPU time ({wall:.1f} s on the clock), its time limit of "
                f"{cpu_limit:g} CPU s per launch: an endless loop, or a thread spinning on a value no other thread "
                "will change?")
    used = f"having used {cpu:.1f} s of CPU time" if cpu == cpu else "the emulator not answering"
    return (f"stopped after {wall:.0f} s on the clock, its wall-clock cap, {used} (the limit is "
            f"{cpu_limit:g} CPU s): the kernel is blocked, waiting for something that never happens, or the "
            "machine is overloaded.")


def _as_values(raw: np.ndarray, like: np.ndarray, dtype_name: str | None) -> np.ndarray:
    if dtype_name == "bfloat16" or like.dtype.name == "bfloat16":
        bits = raw.view(np.uint16).astype(np.uint32) << 16
        return bits.view(np.float32)
    values = raw.view(like.dtype)
    if values.dtype.kind == "f" and values.dtype.itemsize < 4:
        return values.astype(np.float32)
    return values


def _xyz(v) -> str:
    return f"({v[0]},{v[1]},{v[2]})"


def _who(o: _worker.Outcome) -> str:
    if o.thread is not None and o.block is not None:
        return f"thread {_xyz(o.thread)} of block {_xyz(o.block)}"
    if o.block is not None:
        return f"block {_xyz(o.block)}"
    return "the kernel"


def _shared_symbol(lib_path, offset: int) -> tuple[str | None, int]:
    """The static __shared__ variable (a TLS symbol of the library) at ``offset`` in its TLS block."""
    try:
        out = subprocess.run(["readelf", "-sW", "-C", str(lib_path)], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None, 0
    for row in out.splitlines():
        parts = row.split(None, 7)
        if len(parts) < 8 or parts[3] != "TLS" or parts[6] == "UND":
            continue
        start, size = int(parts[1], 16), int(parts[2], 0)
        if start <= offset < start + max(size, 1):
            return parts[7].rsplit("::", 1)[-1], start
    return None, 0


def _source_lines(lib_path, offset: int) -> list[int]:
    """The student's lines for a code address in the library: the innermost frame in kernel.cu first,
    then the lines that called it, where the compiler inlined the call (a lambda, a device function)."""
    if offset <= 0:
        return []
    try:
        out = subprocess.run(["addr2line", "-e", str(lib_path), "-i", f"{offset:#x}"],
                             capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    lines = []
    for row in out.splitlines():
        path, _, rest = row.rpartition(":")
        if os.path.basename(path) == "kernel.cu":
            digits = rest.split()[0] if rest.split() else ""
            if digits.isdigit() and int(digits) not in lines:
                lines.append(int(digits))
    return lines


def _quoted(lib: Library, n: int) -> str:
    return f"line {n}: `{lib.source_lines[n - 1].strip()}`" if 1 <= n <= len(lib.source_lines) else f"line {n}"


def _with_copy_calls(o: _worker.Outcome, lib: Library) -> str:
    """A usage error's text, with the lines that called the cp.async of an in-flight read named when the
    copy sits in a function the kernel calls (a given copier, a lambda): its own line alone would point
    there, not at the call the student wrote."""
    offset = o.copy_pc - o.lib_base
    if not o.copy_pc or not 0 < offset < os.path.getsize(lib.path):
        return o.text
    lines = _source_lines(lib.path, offset)
    marker = f"the cp.async on line {lines[0]}" if lines else ""
    calls = [n for n in lines[1:] if n != lines[0]]
    if not calls or marker not in o.text:
        return o.text
    return o.text.replace(marker, marker + "".join(f", called from {_quoted(lib, n)}" for n in calls), 1)


def _calling_lines(o: _worker.Outcome, lib: Library, line: int | None) -> tuple[int, ...]:
    """The student's lines that called the function holding ``line`` (a lambda, a device function
    the compiler kept out of line), outermost last, from the return addresses of a usage error."""
    if line is None or not o.callers:
        return ()
    size = os.path.getsize(lib.path)
    calls: list[int] = []
    for address in o.callers:
        offset = address - 1 - o.lib_base  # a return address is just past its call
        if 0 < offset < size:
            calls += [n for n in _source_lines(lib.path, offset) if n != line and n not in calls]
    return tuple(calls)


def _source_line(lib_path, offset: int) -> int | None:
    """The student's line for a code address in the library (innermost frame in kernel.cu)."""
    lines = _source_lines(lib_path, offset)
    return lines[0] if lines else None

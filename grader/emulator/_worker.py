"""The worker process that runs kernels, and the shared memory its arrays cross through.

One persistent worker per fiber back end. It is a separate process so that nothing a kernel
does (segfault, abort, wild write, endless loop) can harm the Python process: on any error it
writes an error record into the shared file and exits, and the next launch starts a new one.
"""
from __future__ import annotations

import mmap
import os
import select
import signal
import struct
import subprocess
import tempfile
import time
from dataclasses import dataclass, field

import numpy as np

from . import _toolchain as tc

PAGE = mmap.PAGESIZE
GUARD = 64 * 1024  # must match kGuard in launcher.cpp
HEADER_BYTES = 64 * 1024  # must match kHeaderBytes in launcher.cpp
PRINT_SEGMENT = 1 << 20  # per OS thread; a GPU's printf FIFO is 1 MiB in all by default
_RECORD = struct.Struct("<10i13Q")  # ErrorRecord up to its text
_TEXT_BYTES = 8192

# Error kinds (Kind in launcher.cpp).
SEGV, BOUNDS, FPE, ASSERT, TRAP, BARRIER, TIMEOUT, STACK, BUS, OTHER, SHARED_OOB, RACE, USAGE = range(1, 14)


def default_threads() -> int:
    """OS threads that run blocks: ``GRADER_EMULATOR_THREADS``, else the cores this process may use
    (its CPU affinity and its cgroup's quota, not every core of the machine: more threads than
    cores only take turns, and each switch costs)."""
    env = os.environ.get("GRADER_EMULATOR_THREADS")
    return max(1, int(env)) if env else usable_cores()


def usable_cores() -> int:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:  # cgroup v2: "max 100000" or "QUOTA PERIOD"
        quota, period = open("/sys/fs/cgroup/cpu.max").read().split()
        if quota != "max":
            cores = min(cores, max(1, int(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, cores)


@dataclass
class ArraySlot:
    """Where one array argument sits in the shared file and, once known, in the worker."""

    index: int  # argument position
    file_off: int  # page-aligned start of its region in the shared file
    span: int  # region length (whole pages)
    inner: int  # offset of the data inside the region
    nbytes: int


@dataclass
class Outcome:
    """What came back from one run: either io numbers (and profile sites) or an error record."""

    ok: bool
    cpu_seconds: float = 0.0  # the worker's CPU time on the launch, all its threads
    io: list = field(default_factory=list)
    profile: list = field(default_factory=list)  # (site, shared, store, size, requests, units, ideal, lanes)
    kind: int = 0
    block: tuple | None = None
    thread: tuple | None = None
    line: int | None = None
    is_write: bool = False
    addr: int = 0
    pc: int = 0
    arena_base: int = 0
    lib_base: int = 0
    callers: tuple = ()  # return addresses up the stack of a usage error, innermost first
    copy_pc: int = 0  # a read of bytes still in flight: the code address of the cp.async that was issued there
    text: str = ""
    printed: str = ""
    stderr: str = ""


class WorkerDied(Exception):
    """The worker vanished without an error record (it crashed beyond its own handlers)."""


class Worker:
    def __init__(self, backend: str):
        self.backend = backend
        self.threads = default_threads()
        self.fd = os.memfd_create("grader-emulator")
        self.arena_off = HEADER_BYTES + self.threads * PRINT_SEGMENT
        self.size = self.arena_off + (16 << 20)
        os.ftruncate(self.fd, self.size)
        self.mm = mmap.mmap(self.fd, self.size)
        self.stderr_file = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [str(tc.launcher(backend)), str(self.fd), str(self.threads), str(PRINT_SEGMENT)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr_file,
            pass_fds=(self.fd,), bufsize=0, start_new_session=True,
        )
        self.pending = b""
        self.libs: dict[str, int] = {}
        line = self._readline(time.monotonic() + 30)
        if line != "READY":
            self.close()
            raise WorkerDied(f"the emulator worker did not start: {line!r} {self.stderr()}")

    # ------------------------------------------------------------------ plumbing

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stderr(self) -> str:
        self.stderr_file.seek(0)
        return self.stderr_file.read()[-4000:].decode(errors="replace")

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            f.close()
        self.mm.close()
        os.close(self.fd)
        self.stderr_file.close()

    def _send(self, text: str) -> None:
        try:
            self.proc.stdin.write(text.encode())
        except (BrokenPipeError, OSError) as e:
            raise WorkerDied(f"the emulator worker is gone ({e})") from None

    def _readline(self, deadline: float) -> str | None:
        """One reply line; "" at end of file (the worker exited), None when the deadline passes."""
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.pending:
            wait = deadline - time.monotonic()
            if wait <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], wait)
            if not ready:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return ""
            self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\n")
        return line.decode()

    # ------------------------------------------------------------------ commands

    def load(self, path: str) -> int:
        if path in self.libs:
            return self.libs[path]
        self._send(f"LOAD {path}\n")
        reply = self._readline(time.monotonic() + 60)
        if not reply:
            raise WorkerDied(f"the emulator worker died loading a kernel: {self.stderr()}")
        if not reply.startswith("OK "):
            raise WorkerDied(f"the emulator worker cannot load the kernel library: {reply[4:]}")
        self.libs[path] = int(reply.split()[1])
        return self.libs[path]

    def layout(self, args: list, *, align_start: bool, align: int = 1) -> list[ArraySlot]:
        """Place every array argument in its own page-rounded region. By default the data ends at
        the region's end, so the next byte is in a guard gap in the worker; ``align_start`` puts
        it at the start instead, so the byte before it is guarded. ``align`` > 1 keeps each start
        a multiple of ``align`` bytes, as cudaMalloc's are (vector loads and cp.async rely on it):
        the data then ends up to ``align`` - 1 bytes before the guard gap, in canary bytes."""
        slots, off = [], self.arena_off
        for i, a in enumerate(args):
            if not isinstance(a, np.ndarray):
                continue
            span = -(-a.nbytes // PAGE) * PAGE
            inner = 0 if align_start else (span - a.nbytes) // align * align
            slots.append(ArraySlot(i, off, span, inner, a.nbytes))
            off += span
        if off > self.size:
            self._grow(off)
        return slots

    def _grow(self, needed: int) -> None:
        size = max(needed, 2 * self.size)
        os.ftruncate(self.fd, size)
        self.mm.close()
        self.mm = mmap.mmap(self.fd, size)
        self.size = size

    def view(self, slot: ArraySlot) -> np.ndarray:
        return np.frombuffer(self.mm, dtype=np.uint8, count=slot.nbytes, offset=slot.file_off + slot.inner)

    def fill(self, slots: list[ArraySlot], args: list) -> None:
        """Copy the arrays in; the bytes around each one get 0xFF, a canary (and NaN if read)."""
        for s in slots:
            pad_end = s.file_off + s.span
            self.mm[s.file_off:s.file_off + s.inner] = b"\xff" * s.inner
            self.mm[s.file_off + s.inner + s.nbytes:pad_end] = b"\xff" * (pad_end - s.file_off - s.inner - s.nbytes)
            if s.nbytes:
                self.view(s)[:] = args[s.index].reshape(-1).view(np.uint8)

    def canary_damaged(self, slot: ArraySlot) -> bool:
        before = self.mm[slot.file_off:slot.file_off + slot.inner]
        return before.count(b"\xff") != len(before)

    def canary_after_damaged(self, slot: ArraySlot) -> bool:
        """Whether the bytes between the array's end and its region's end were written."""
        after = self.mm[slot.file_off + slot.inner + slot.nbytes:slot.file_off + slot.span]
        return after.count(b"\xff") != len(after)

    def run(self, lib: int, entry: str, grid, block, shared_mem: int, args: list, slots: list[ArraySlot],
            *, reverse: bool, count_io: bool, time_limit: float, wall_cap: float, race: bool = False,
            profile: bool = False) -> Outcome:
        """One launch; ``time_limit`` is in CPU seconds of the worker, ``wall_cap`` in seconds on the clock."""
        by_index = {s.index: s for s in slots}
        parts = []
        for i, a in enumerate(args):
            if i in by_index:
                s = by_index[i]
                parts.append(f"P {s.file_off} {s.span} {s.inner} {s.nbytes}")
            else:
                raw = np.asarray(a).tobytes().ljust(8, b"\0")[:8]
                parts.append(f"S {int.from_bytes(raw, 'little'):x}")
        flags = (1 if reverse else 0) | (2 if count_io else 0) | (4 if race else 0) | (8 if profile else 0)
        cmd = (f"RUN {lib} {entry} {grid[0]} {grid[1]} {grid[2]} {block[0]} {block[1]} {block[2]} "
               f"{shared_mem} {flags} {time_limit!r} {wall_cap!r} {len(args)} {' '.join(parts)}\n")
        start = time.monotonic()
        self._send(cmd)
        # The worker enforces both limits itself; this grace period covers a worker that cannot.
        reply = self._readline(start + wall_cap + 5.0)
        printed = self._printed()
        if reply is not None and reply.startswith("OK "):
            words = reply.split()
            sites = self._profile_sites() if profile else []
            return Outcome(True, cpu_seconds=float(words[1]), io=[int(x) for x in words[2:]], profile=sites,
                           printed=printed)
        if reply == "ERR":
            self.proc.wait()
            return self._record(printed)
        if reply is None:  # (the CPU time is unknown here: the worker did not answer)
            return Outcome(False, kind=TIMEOUT, text=f"{time_limit!r} {wall_cap!r} nan {time.monotonic() - start:.3f}",
                           printed=printed)
        status = self.proc.wait()
        raise WorkerDied(f"exit status {status}; {self.stderr()}")

    def _profile_sites(self) -> list[tuple]:
        """The lines after a profiled run's OK: "PROF n", then n sites (see profile.cpp)."""
        deadline = time.monotonic() + 60
        head = self._readline(deadline)
        if not head or not head.startswith("PROF "):
            raise WorkerDied(f"the emulator worker sent no profile: {head!r}")
        sites = []
        for _ in range(int(head.split()[1])):
            row = self._readline(deadline)
            if not row:
                raise WorkerDied("the emulator worker's profile ended early")
            f = row.split()
            sites.append((int(f[0], 16), *(int(v) for v in f[1:])))
        return sites

    def _record(self, printed: str) -> Outcome:
        v = _RECORD.unpack_from(self.mm, 0)
        raw = self.mm[_RECORD.size:_RECORD.size + _TEXT_BYTES]
        text = raw[:raw.find(b"\0")].decode(errors="replace") if b"\0" in raw else raw.decode(errors="replace")
        kind, has_thread = v[0], v[1]
        return Outcome(
            False, kind=kind,
            block=tuple(v[2:5]) if kind != TIMEOUT or has_thread or v[11] else None,
            thread=tuple(v[5:8]) if has_thread else None,
            line=v[8] if v[8] > 0 else None, is_write=bool(v[9]),
            addr=v[10], pc=v[11], arena_base=v[12], lib_base=v[13], callers=tuple(c for c in v[14:22] if c), copy_pc=v[22],
            text=text, printed=printed, stderr=self.stderr(),
        )

    def _printed(self) -> str:
        """printf output of the last run, in block order (each block's in execution order)."""
        records, truncated = [], False
        for t in range(self.threads):
            base = HEADER_BYTES + t * PRINT_SEGMENT
            used, trunc = struct.unpack_from("<QQ", self.mm, base)
            truncated |= bool(trunc)
            pos, end = base + 16, base + 16 + min(used, PRINT_SEGMENT - 16)
            while pos + 8 <= end:
                block, length = struct.unpack_from("<II", self.mm, pos)
                records.append((block, len(records), self.mm[pos + 8:pos + 8 + length]))
                pos += 8 + ((length + 7) & ~7)
        records.sort(key=lambda r: (r[0], r[1]))
        text = b"".join(r[2] for r in records).decode(errors="replace")
        if truncated:
            text += "\n[printf output truncated: more than 1 MiB per CPU thread]\n"
        return text


def worker_starts(slots: list[ArraySlot], arena_base: int) -> dict[int, int]:
    """Start address of each array's data in the worker: the launcher's layout is a guard gap,
    then each region followed by a guard gap."""
    out, at = {}, arena_base + GUARD
    for s in slots:
        out[s.index] = at + s.inner
        at += s.span + GUARD
    return out

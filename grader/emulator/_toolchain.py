"""Compilers, fiber back ends, the cache folder and the launcher executable."""
from __future__ import annotations

import contextlib
import ctypes.util
import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..errors import BackendUnavailableError

PACKAGE_DIR = Path(__file__).resolve().parent
EMU_INCLUDE = PACKAGE_DIR / "include"
EMU_SRC = PACKAGE_DIR / "src"
COURSE_INCLUDE = PACKAGE_DIR.parent / "include"

BACKENDS = ("boost", "ucontext")
_BOOST_HEADER = "boost/context/detail/fcontext.hpp"

# Flags every kernel library gets.
# -fno-finite-loops: a spin-wait with no side effects must stay a loop (the time limit catches
#   it) instead of being deleted.
# -fsanitize=bounds,alignment: indexing a fixed-size shared or local array out of range, and a
#   typed access at a misaligned address (a float4 load from x + 1), call handlers the launcher
#   defines (memory.cpp), which report the line, index or address. The library is linked without
#   the sanitizer runtime, so the launcher's handlers are the only ones.
# -fstack-clash-protection: a huge local array touches each stack page in turn, so it faults on
#   the fiber's guard page instead of silently landing in another fiber's stack.
# -g1 -gdwarf-4: line tables map a fault's address to the student's line (addr2line 2.40 misreads
#   the file names that #line directives give in GCC 12's DWARF 5).
GXX_FLAGS = (
    "-std=c++20", "-O2", "-g1", "-gdwarf-4", "-fPIC", "-fno-semantic-interposition", "-fno-plt",
    "-fno-finite-loops", "-fno-strict-aliasing", "-fstack-clash-protection",
    "-fsanitize=bounds,alignment",
    "-fdiagnostics-color=never", "-Wno-unknown-pragmas", "-Wno-attributes",
)
# IO accounting: clang calls __sanitizer_cov_load*/store* (defined in the launcher) before every
# memory access. The alignment check stays on (its handler is the launcher's); bounds checks stay
# off so that only the kernel's own accesses are traced.
# -fno-vectorize -fno-slp-vectorize: one traced access per access in the source, as a GPU thread
#   makes it (the memory profiler groups them by warp).
# -fno-builtin: otherwise clang turns copy and fill loops into memcpy/memset calls, whose
#   accesses are not traced (FA1's O and Q copies went uncounted).
# func,trace-pc-guard: load and store tracing needs a coverage mode, whose guard callbacks are
#   no-ops here; "func" puts one per function instead of one per edge (capstone_fwd_d64: 7 calls
#   instead of 702, the same 6100 traced accesses, 14 % less compile time).
CLANG_FLAGS = (
    "-std=c++20", "-O2", "-fno-builtin", "-g1", "-gdwarf-4", "-fPIC", "-fno-semantic-interposition", "-fno-finite-loops", "-fno-strict-aliasing",
    "-fsanitize-coverage=func,trace-pc-guard,trace-loads,trace-stores", "-fsanitize=alignment",
    "-fno-vectorize", "-fno-slp-vectorize", "-mllvm", "-enable-tail-merge=false", "-fno-color-diagnostics",
    "-Wno-unknown-pragmas", "-Wno-unknown-attributes", "-w",
    "-DEMU_COUNT_IO=1",
)


def cache_dir() -> Path:
    root = os.environ.get("GRADER_CACHE_DIR")
    path = Path(root) if root else Path.home() / ".cache" / "flash-course" / "emulator"
    path.mkdir(parents=True, exist_ok=True)
    return path


@functools.lru_cache(maxsize=None)
def gxx() -> str | None:
    return shutil.which(os.environ.get("GRADER_CXX", "g++"))


def _remember_found(probe):
    """Cache a probe's answer once it finds something, never a miss: a probe that failed once on a
    loaded machine (a subprocess timing out while other workers start) must not turn the race
    detector or the fast fibers off for the rest of the process."""
    found = []

    def cached():
        if not found:
            answer = probe()
            if not answer:
                return answer
            found.append(answer)
        return found[0]

    cached.__doc__, cached.__wrapped__ = probe.__doc__, probe
    return cached


@_remember_found
def clang() -> str | None:
    """clang++ 16 or newer: clang++-16 by its name (no subprocess), else a plain clang++ that says 16+."""
    versioned = shutil.which("clang++-16")
    if versioned:
        return versioned
    plain = shutil.which("clang++")
    return plain if plain and _clang_major(plain) >= 16 else None


def _clang_major(path: str) -> int:
    try:
        out = subprocess.run([path, "-dumpversion"], capture_output=True, text=True, timeout=60).stdout
        return int(out.strip().split(".")[0])
    except (OSError, ValueError, subprocess.SubprocessError):
        return 0


@functools.lru_cache(maxsize=None)
def compiler_id(path: str) -> str:
    return subprocess.run([path, "--version"], capture_output=True, text=True).stdout.splitlines()[0]


@_remember_found
def boost_available() -> bool:
    dirs = [Path("/usr/include"), Path("/usr/local/include")]
    if not any((d / _BOOST_HEADER).exists() for d in dirs):
        return False
    return ctypes.util.find_library("boost_context") is not None


def fiber_backend() -> str:
    """The fiber back end launches use: GRADER_EMULATOR_FIBERS if set, else boost when present."""
    forced = os.environ.get("GRADER_EMULATOR_FIBERS", "").strip().lower()
    if forced:
        if forced not in BACKENDS:
            raise BackendUnavailableError(f"GRADER_EMULATOR_FIBERS={forced!r}: choose 'boost' or 'ucontext'.")
        if forced == "boost" and not boost_available():
            raise BackendUnavailableError(
                "GRADER_EMULATOR_FIBERS=boost but Boost.Context is not installed: "
                "apt-get install libboost-context-dev (or unset the variable to use ucontext)."
            )
        return forced
    return "boost" if boost_available() else "ucontext"


def available() -> tuple[bool, str]:
    compiler = gxx()
    if compiler is None:
        return False, "the CPU emulator needs g++ (C++20): apt-get install g++"
    fibers = "Boost.Context" if boost_available() else "ucontext (apt-get install libboost-context-dev for speed)"
    io = "clang-16 present" if clang() else "no clang-16 (count_io unavailable: apt-get install clang-16)"
    return True, f"{compiler_id(compiler)}; fibers: {fibers}; {io}"


def require_gxx() -> str:
    compiler = gxx()
    if compiler is None:
        raise BackendUnavailableError("The CPU emulator needs g++ with C++20: apt-get install g++")
    return compiler


def require_clang() -> str:
    compiler = clang()
    if compiler is None:
        raise BackendUnavailableError(
            "count_io=True needs clang 16 or newer to trace memory accesses: apt-get install clang-16"
        )
    return compiler


@functools.lru_cache(maxsize=None)
def runtime_version() -> str:
    """Hash of everything a compiled kernel depends on besides its own source."""
    h = hashlib.sha256()
    for folder in (EMU_INCLUDE, EMU_SRC, COURSE_INCLUDE):
        for f in sorted(folder.glob("*")):
            if f.is_file():
                h.update(f.name.encode())
                h.update(f.read_bytes())
    h.update(repr((GXX_FLAGS, CLANG_FLAGS)).encode())
    h.update(compiler_id(require_gxx()).encode())
    return h.hexdigest()[:16]


_ANNOUNCED: list = []  # whether this process has said that it builds the runtime
BUILD_TIMES = "build-seconds.json"  # in cache_dir(): how long each piece took to build here, last time


@contextlib.contextmanager
def building(piece: str):
    """A build of a piece of the runtime (once per grader version and machine): the first says what
    is being built and about how long it takes (as long as last time here, when there was one), each
    then how long it took. The wait is otherwise silent, in a notebook (only [*]) as on the command
    line. On stdout: nbgrader scores a test cell that wrote to stderr as failed, and the first build
    can happen in one."""
    record = cache_dir() / BUILD_TIMES
    try:
        before = json.loads(record.read_text())
    except (OSError, ValueError):
        before = {}
    if not _ANNOUNCED:
        _ANNOUNCED.append(True)
        took = (f"the last build on this machine took {sum(before.values()):.0f} s" if before else
                "from a few seconds to about a minute on two cores, longer on a busy machine")
        print("grader: building the CPU emulator's runtime (its launcher and a precompiled header of the CUDA "
              f"runtime), once for this version of the grader: {took}. Later launches reuse it from {cache_dir()}.",
              file=sys.stdout, flush=True)
    start = time.monotonic()
    yield
    seconds = time.monotonic() - start
    print(f"grader: built the emulator's {piece} in {seconds:.0f} s", file=sys.stdout, flush=True)
    try:
        record.write_text(json.dumps(before | {piece: round(seconds, 1)}))
    except OSError:
        pass  # a read-only cache (the clean regrade's): nothing to remember


def publish_dir(tmp: Path, final: Path) -> None:
    """Move a finished build folder into place; another process may have won the race."""
    try:
        os.replace(tmp, final)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)


def launcher(backend: str) -> Path:
    """The worker executable for one fiber back end, built once per runtime version."""
    final = cache_dir() / "launcher" / f"{runtime_version()}-{backend}"
    exe = final / "emu-launcher"
    if exe.exists():
        return exe
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=".build-"))
    cmd = [
        require_gxx(), "-std=c++20", "-O2", "-g", "-pthread", "-rdynamic", f"-iquote{EMU_INCLUDE}",
        f"-DEMU_FIBERS_BOOST={1 if backend == 'boost' else 0}",
        f"-iquote{EMU_SRC}", *sorted(str(f) for f in EMU_SRC.glob("*.cpp")), "-o", str(tmp / "emu-launcher"), "-ldl",
    ]
    if backend == "boost":
        cmd.append("-lboost_context")
    with building("launcher"):
        done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise BackendUnavailableError(f"building the emulator's launcher failed:\n{done.stderr[-4000:]}")
    publish_dir(tmp, final)
    return exe

"""The memory profiler's result: per source line, how well a kernel's warps use the memory system.

A GPU issues each load or store once per warp (a *request*). Global memory moves it in 32-byte
*sectors*: 32 lanes reading consecutive floats touch 4 sectors, a stride of 32 floats touches 32.
Shared memory serves a request in *wavefronts*: 32 banks of 4 bytes, each delivering one distinct
word per wavefront, so lanes hitting different words of one bank (a bank conflict) take several;
8-byte accesses go a half warp, 16-byte ones a quarter warp at a time. The worker (profile.cpp)
groups the lanes' accesses into requests and counts both; here the code addresses become source
lines. The totals correspond to Nsight Compute's ``l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum``,
``l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum`` (and ``_op_st``),
``l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum`` and ``smsp__inst_executed_op_shared_ld.sum``
(and ``_st``); ldmatrix counts as a 16-byte shared load (Nsight: ``..._op_ldsm``).

Not modelled: caches (every request's sectors count, as in the l1tex counters above), atomics,
cp.async (it copies outside the traced code), and the compiler: the CPU build keeps in registers
or reloads what nvcc might treat otherwise, so compare orders of magnitude between variants, and
totals with Nsight's only roughly.
"""
from __future__ import annotations

import functools
import os
import subprocess
from dataclasses import asdict, dataclass, field

from ..source import FILE_NAME

# Totals in the order table() prints them; the Nsight Compute metric each corresponds to.
NCU_METRICS = {
    "global_load_sectors": "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "global_load_requests": "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "global_store_sectors": "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
    "global_store_requests": "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
    "shared_load_wavefronts": "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "shared_load_requests": "smsp__inst_executed_op_shared_ld.sum",
    "shared_store_wavefronts": "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
    "shared_store_requests": "smsp__inst_executed_op_shared_st.sum",
}


@dataclass(frozen=True)
class ProfileRow:
    """One kind of access on one source line. ``units`` are sectors (global) or wavefronts
    (shared), summed over the line's ``requests``; ``ideal`` the fewest the same bytes need."""

    line: int | None  # None: no line of the kernel's source (see code)
    code: str  # the line's text; without a line, the runtime function that made the access, if known
    space: str  # "global" or "shared"
    op: str  # "load" or "store"
    bytes: int  # per lane access
    requests: int
    units: int
    ideal: int
    lane_accesses: int

    @property
    def kind(self) -> str:
        return f"{self.space} {self.op}"

    @property
    def per_request(self) -> float:
        return self.units / self.requests if self.requests else 0.0

    @property
    def ideal_per_request(self) -> float:
        return self.ideal / self.requests if self.requests else 0.0

    @property
    def lanes_per_request(self) -> float:
        return self.lane_accesses / self.requests if self.requests else 0.0


@dataclass
class Profile:
    """Memory requests of one launch, per source line (``rows``) and in total (``totals``)."""

    kernel: str
    rows: list[ProfileRow] = field(default_factory=list)

    @property
    def totals(self) -> dict[str, int]:
        t = dict.fromkeys(NCU_METRICS, 0)
        for r in self.rows:
            unit = "sectors" if r.space == "global" else "wavefronts"
            t[f"{r.space}_{r.op}_{unit}"] += r.units
            t[f"{r.space}_{r.op}_requests"] += r.requests
        return t

    @property
    def ideal_totals(self) -> dict[str, int]:
        t = {}
        for r in self.rows:
            unit = "sectors" if r.space == "global" else "wavefronts"
            key = f"{r.space}_{r.op}_{unit}"
            t[key] = t.get(key, 0) + r.ideal
        return {k: t.get(k, 0) for k in NCU_METRICS if not k.endswith("requests")}

    def line(self, line: int) -> list[ProfileRow]:
        """The rows of one source line."""
        return [r for r in self.rows if r.line == line]

    def to_dict(self) -> dict:
        rows = [asdict(r) | {"kind": r.kind} for r in self.rows]
        return {"kernel": self.kernel, "rows": rows, "totals": self.totals, "ideal": self.ideal_totals,
                "ncu_metrics": NCU_METRICS}

    def table(self) -> str:
        head = ("line", "access", "bytes", "requests", "per request", "ideal", "lanes", "source")
        body = []
        for r in self.rows:
            unit = "sectors" if r.space == "global" else "wavefronts"
            flag = "  <-" if r.per_request > 1.5 * r.ideal_per_request else ""
            body.append((
                "-" if r.line is None else str(r.line), r.kind, str(r.bytes), str(r.requests),
                f"{r.per_request:.1f} {unit}", f"{r.ideal_per_request:.1f}", f"{r.lanes_per_request:.1f}",
                (r.code[:60] + flag) if r.code else flag.strip(),
            ))
        widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(head)]
        fmt = "  ".join(f"{{:{'<' if i in (1, 7) else '>'}{w}}}" for i, w in enumerate(widths[:-1])) + "  {}"
        out = [f"memory profile of {self.kernel} (per warp request; <- : over 1.5x the ideal)", fmt.format(*head)]
        out += [fmt.format(*b) for b in body]
        if not body:
            out.append("(no global or shared loads or stores)")
        t, ideal = self.totals, self.ideal_totals
        out.append("totals:")
        for space, unit in (("global", "sectors"), ("shared", "wavefronts")):
            for op in ("load", "store"):
                units, reqs = t[f"{space}_{op}_{unit}"], t[f"{space}_{op}_requests"]
                if reqs:
                    out.append(f"  {space} {op}s: {reqs} requests, {units} {unit} "
                               f"({units / reqs:.2f} per request; ideal {ideal[f'{space}_{op}_{unit}']})")
        out.append("Counted per access in the source. A GPU's compiler may merge one thread's neighbouring "
                   "shared loads into one 8- or 16-byte load, so it can issue fewer shared requests "
                   "(benchmarks/results/profile_vs_ncu.txt compares with Nsight Compute).")
        return "\n".join(out)


def build_profile(kernel: str, lib_path, source_lines, sites: list[tuple]) -> Profile:
    """``sites``: the worker's (site, shared, store, size, requests, units, ideal, lanes) tuples,
    site a return address in the library; rows merge the sites of one line and kind."""
    where = _locate(lib_path, sorted({s[0] - 1 for s in sites}))
    merged: dict[tuple, list] = {}
    for site, shared, store, size, requests, units, ideal, lanes in sites:
        line, function = where.get(site - 1, (None, ""))
        code = source_lines[line - 1].strip() if line and 1 <= line <= len(source_lines) else ""
        if line is None and function:
            code = f"(in {function})"
        key = (line, code, "shared" if shared else "global", "store" if store else "load", size)
        acc = merged.setdefault(key, [0, 0, 0, 0])
        for i, v in enumerate((requests, units, ideal, lanes)):
            acc[i] += v
    rows = [ProfileRow(line, code, space, op, size, *totals)
            for (line, code, space, op, size), totals in merged.items()]
    rows.sort(key=lambda r: (r.line is None, r.line or 0, r.space, r.op, r.bytes))
    return Profile(kernel, rows)


def _locate(lib_path, offsets: list[int]) -> dict[int, tuple[int | None, str]]:
    """Code offset -> (the innermost line in the kernel's own source, or None; the function of the
    outermost inlined frame), from one addr2line call. Without a line the access was made in a
    runtime function the compiler did not inline (ldmatrix's row load, say)."""
    if not offsets:
        return {}
    try:
        out = subprocess.run(["addr2line", "-e", str(lib_path), "-a", "-f", "-i", "-C", *(f"{o:#x}" for o in offsets)],
                             capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    found: dict[int, tuple[int | None, str]] = {}
    rows = out.splitlines()
    current, i = None, 0
    while i < len(rows):
        if rows[i].startswith("0x"):
            current = int(rows[i], 16)
            found[current] = (None, "")
            i += 1
            continue
        function, location = rows[i], rows[i + 1] if i + 1 < len(rows) else ""
        i += 2
        if current is None:
            continue
        line, _ = found[current]
        path, _, rest = location.rpartition(":")
        digits = rest.split()[0] if rest.split() else ""
        if line is None and os.path.basename(path) == FILE_NAME and digits.isdigit() and int(digits) > 0:
            line = int(digits)
        found[current] = (line, function if function != "??" else "")
    return found


def profile_case(exercise_id: str, source: str, case: str | None = None) -> tuple[Profile, str]:
    """Profile ``source`` on one of an exercise's cases (default: its first visible case) on the
    emulator; returns the profile and the case's description."""
    from ..backend import set_backend
    from ..checks import get_exercise, launch_case
    from ..errors import CourseError
    from ..kernel import RawKernel

    ex = get_exercise(exercise_id)
    cases = ex.visible_cases() if case is None else [c for c in ex.cases if c.name == case]
    if not cases:
        raise CourseError(f"{exercise_id} has no case named {case!r}. Known: {', '.join(c.name for c in ex.cases)}")
    c = cases[0]
    set_backend("cpu")  # the arrays launch_case makes must be host arrays
    kernel = RawKernel(source, ex.kernel, options=ex.options, backend="cpu").compile()
    launch_case(ex, functools.partial(kernel, profile=True), c, c.seed)  # a partial: the check opts in to shared memory
    return kernel.last_launch.profile, c.describe()

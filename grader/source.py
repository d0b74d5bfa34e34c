"""How a student's kernel becomes a translation unit, and how compiler logs map back to it.

Every backend compiles the same text: the course prelude, then a ``#line`` directive so that
diagnostics count lines in the student's own cell, then the student's code.
"""
from __future__ import annotations

import re
from pathlib import Path

INCLUDE_DIR = Path(__file__).parent / "include"
FILE_NAME = "kernel.cu"


_STUDENT_START = f'#line 1 "{FILE_NAME}"\n'


def translation_unit(code: str) -> str:
    return f'#include "course.cuh"\n{_STUDENT_START}{code}'


def cell_code(cell: str) -> str:
    """The kernel code of a ``%%cuda`` cell body, numbered as the cell shows it.

    IPython hands the magic the cell without its ``%%cuda NAME`` line; an empty first line in
    its place keeps every line number the compilers, the emulator and the profiler report equal
    to the one the notebook editor shows (the ``%%cuda`` line is line 1)."""
    return "\n" + cell


def student_code(source: str) -> str:
    """The student's code back out of a translation unit (the inverse of the above)."""
    at = source.find(_STUDENT_START)
    return source[at + len(_STUDENT_START):] if at >= 0 else source


# NVRTC: "kernel.cu(12): error: ..."; gcc/clang: "kernel.cu:12:5: error: ..."
_LOC = re.compile(rf'{re.escape(FILE_NAME)}(?:\((\d+)\)|:(\d+)(?::\d+)?):\s*(error|warning|note|catastrophic error)?:?\s*(.*)')


def format_compile_log(log: str, code: str, kernel: str, compiler: str) -> str:
    """Keep the diagnostics about the student's code, each followed by the line it points at."""
    lines = code.splitlines()
    out = [f"{kernel}: the {compiler} compiler rejected the kernel."]
    seen = set()
    for raw in log.splitlines():
        m = _LOC.search(raw)
        if not m:
            continue
        lineno = int(m.group(1) or m.group(2))
        kind = m.group(3) or "error"
        text = m.group(4).strip()
        if kind == "note" or (lineno, text) in seen:
            continue
        seen.add((lineno, text))
        out.append(f"  line {lineno}: {kind}: {text}")
        if 1 <= lineno <= len(lines):
            out.append(f"      {lines[lineno - 1].strip()}")
    if len(out) == 1:  # nothing pointed into the student's code: show the log as it is
        out.append(log.strip())
    return "\n".join(out)

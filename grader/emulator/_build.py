"""From CUDA C source to a kernel library: source rewrites, compiler calls, diagnostics, cache."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import CompileError, KernelSourceError
from ..signature import kernel_names, parse_signature, strip_comments
from ..source import FILE_NAME as STUDENT_FILE
from ..source import student_code
from . import _toolchain as tc

_GENERATED_FILE = "<emulator>"


# ----------------------------------------------------------------------------- rewrites

_EXTERN_C = re.compile(r'\bextern\s*"C"(\s*\{)?')
_EXTERN_SHARED = re.compile(r"\bextern\s+__shared__\s+([^;]*?)\s*\[\s*\]\s*;")
_ATTRIBUTES = re.compile(r"__align__\s*\(\s*\d+\s*\)|alignas\s*\([^)]*\)|__attribute__\s*\(\(.*?\)\)")
_LINE_DIRECTIVE = re.compile(r"^\s*#\s*line\s+(\d+)", re.M)


def _keep_newlines(text: str) -> str:
    return "\n" * text.count("\n")


def _line_at(source: str, pos: int) -> int:
    """The line number the compiler gives position ``pos``, honouring #line directives."""
    line, start = 1, 0
    for m in _LINE_DIRECTIVE.finditer(source, 0, pos):
        end = source.find("\n", m.end())
        if end < 0 or end >= pos:
            break
        line, start = int(m.group(1)), end + 1
    return line + source.count("\n", start, pos)


def _in_function_or_class(clean: str, pos: int) -> bool:
    """Whether ``pos`` lies inside braces other than namespace / extern "C" blocks."""
    stack = []
    last_stop = 0
    for i in range(pos):
        c = clean[i]
        if c == "{":
            head = clean[last_stop:i]
            stack.append(bool(re.search(r'\bnamespace\b[^;{}]*$|\bextern\s*"C"\s*$', head)))
            last_stop = i + 1
        elif c == "}":
            if stack:
                stack.pop()
            last_stop = i + 1
        elif c == ";":
            last_stop = i + 1
    return not all(stack)


def rewrite(source: str) -> str:
    """Make CUDA-only constructs plain C++ without moving any line.

    ``extern "C"`` goes: kernels become C++ overloads, so a kernel named like a libc function
    (``div``, ``exp``) coexists with it. ``extern __shared__ T name[];`` becomes a pointer to the
    block's dynamic shared memory.
    """
    clean = strip_comments(source)
    edits: list[tuple[int, int, str]] = []
    for m in _EXTERN_C.finditer(clean):
        text = source[m.start():m.end()]
        if m.group(1):
            edits.append((m.start(), m.end(), "inline namespace emu_c {" + _keep_newlines(text)))
        else:
            edits.append((m.start(), m.end(), re.sub(r"[^\n]", " ", text)))
    for m in _EXTERN_SHARED.finditer(clean):
        decl = _ATTRIBUTES.sub(" ", m.group(1)).strip()
        name = re.search(r"(\w+)$", decl)
        if not name:
            continue
        ctype = decl[: name.start()].strip() or "unsigned char"
        ident = name.group(1)
        cast = f"reinterpret_cast<{ctype}*>(emu_ctx.dyn_smem)"
        original = source[m.start():m.end()]
        if _in_function_or_class(clean, m.start()):
            edits.append((m.start(), m.end(), f"{ctype}* const {ident} = {cast};" + _keep_newlines(original)))
        else:
            # At namespace scope a variable would be initialised once, not per block: use a macro,
            # on its own line, then restore the numbering of the rest of the original line.
            line = _line_at(source, m.start()) + original.count("\n")
            edits.append((m.start(), m.end(), f"\n#define {ident} ({cast})\n#line {line}\n"))
    out, last = [], 0
    for start, end, text in sorted(edits):
        if start < last:
            continue
        out.append(source[last:start])
        out.append(text)
        last = end
    out.append(source[last:])
    return "".join(out)


def _entry_wrappers(source: str) -> tuple[str, list[str]]:
    """extern "C" entry points the launcher calls: emu_entry_<kernel>(void* const* args)."""
    lines = [f'#line 1 "{_GENERATED_FILE}"',
             'extern "C" __attribute__((visibility("default"))) void* emu_tls_touch() '
             "{ static thread_local char anchor; return &anchor; }"]
    names = []
    for name in dict.fromkeys(kernel_names(source)):
        try:
            sig = parse_signature(source, name)
        except KernelSourceError:
            continue  # template kernels cannot be launched by name
        # Pointers pass as T* (never const T*): that converts to either parameter form, and
        # overload resolution then picks the kernel over any libc function of the same name.
        args = ", ".join(
            f"*static_cast<{p.ctype}{'*' if p.pointer else ''}*>(a[{i}])" for i, p in enumerate(sig.params)
        )
        lines.append(f'extern "C" __attribute__((visibility("default"))) void emu_entry_{name}(void* const* a) '
                     f"{{ {name}({args}); }}")
        names.append(name)
    return "\n".join(lines) + "\n", names


# ----------------------------------------------------------------------------- options

def parse_options(options) -> tuple[list[str], list[str]]:
    """(-D flags, -I flags) from CuPy/NVRTC-style options; everything else is ignored."""
    defines, includes = [], []
    items = list(options or ())
    i = 0
    while i < len(items):
        opt = str(items[i])
        value = items[i + 1] if i + 1 < len(items) else None
        if opt in ("-D", "--define-macro", "-I", "--include-path") and value is not None:
            (defines if opt in ("-D", "--define-macro") else includes).append(str(value))
            i += 2
            continue
        if opt.startswith("--define-macro="):
            defines.append(opt.split("=", 1)[1])
        elif opt.startswith("-D") and len(opt) > 2:
            defines.append(opt[2:])
        elif opt.startswith("--include-path="):
            includes.append(opt.split("=", 1)[1])
        elif opt.startswith("-I") and len(opt) > 2:
            includes.append(opt[2:])
        i += 1
    return [f"-D{d}" for d in defines], [f"-I{os.path.abspath(p)}" for p in includes]


# ----------------------------------------------------------------------------- diagnostics

_DIAG = re.compile(r"^(?P<file>[^\s:][^:]*):(?P<line>\d+):(?:(?P<col>\d+):)? (?P<kind>fatal error|error|warning|note): (?P<msg>.*)$")
_CONTEXT = re.compile(r"^(?P<file>[^\s:][^:]*):(?:\d+:\d+:)? *(In |required from|  required)")


_BUILTIN_SPELLING = [
    (re.compile(r"\(?static_cast<const (?:::)?(?:uint3|dim3)&>\(emu_ctx\.cur->tid\)\)?"), "threadIdx"),
    (re.compile(r"\(?static_cast<const (?:::)?(?:uint3|dim3)&>\(emu_ctx\.block_idx\)\)?"), "blockIdx"),
    (re.compile(r"\(?static_cast<const (?:::)?(?:uint3|dim3)&>\(emu_ctx\.block_dim\)\)?"), "blockDim"),
    (re.compile(r"\(?static_cast<const (?:::)?(?:uint3|dim3)&>\(emu_ctx\.grid_dim\)\)?"), "gridDim"),
    (re.compile(r"reinterpret_cast<[^>]*>\(emu_ctx\.dyn_smem\)"), "extern __shared__ memory"),
]


def _tidy(text: str) -> str:
    """The runtime's spellings back into CUDA's, so messages show what the student wrote."""
    for pattern, cuda in _BUILTIN_SPELLING:
        text = pattern.sub(cuda, text)
    return text.replace("::emu::", "").replace("emu::", "").replace("emu_c::", "")


def student_diagnostics(stderr: str) -> str:
    """Keep the compiler's messages about the student's file; drop our headers' internals."""
    out: list[str] = []
    keep = False
    for line in stderr.splitlines():
        m = _DIAG.match(line)
        if m:
            mine = os.path.basename(m["file"]) == STUDENT_FILE
            if mine:
                out.append(f"{STUDENT_FILE}:{m['line']}:{m['col'] or 1}: {m['kind']}: {_tidy(m['msg'])}")
            elif m["kind"] in ("error", "fatal error"):
                out.append(f"{m['kind']}: {_tidy(m['msg'])}")
            keep = mine
            continue
        c = _CONTEXT.match(line)
        if c:
            keep = os.path.basename(c["file"]) == STUDENT_FILE
            if keep:
                out.append(_tidy(line))
            continue
        if line.startswith(("In file included from", "                 from", "compilation terminated")):
            keep = False
            continue
        if keep and line.startswith(" "):
            out.append(line)
    text = "\n".join(out).strip()
    if not text:
        tail = [re.sub(r"(/[^\s:]+/)+", "", ln) for ln in stderr.strip().splitlines()[-30:]]
        text = "\n".join(tail)
    return text


# ----------------------------------------------------------------------------- building

@dataclass(frozen=True)
class Library:
    path: Path
    static_shared: dict  # kernel name -> bytes of static __shared__ it can use
    source_lines: tuple  # the student's lines, for quoting in messages


def _hash(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode())
        h.update(b"\0")
    return h.hexdigest()[:24]


def _tls_sizes(lib: Path, kernels: list[str]) -> dict:
    """Static shared bytes per kernel from the library's TLS symbols: a kernel's own function-
    local __shared__ variables plus every other one (namespace scope, __device__ helpers)."""
    out = subprocess.run(["readelf", "-sW", "-C", str(lib)], capture_output=True, text=True).stdout
    own = {k: 0 for k in kernels}
    common = 0
    for row in out.splitlines():
        parts = row.split(None, 7)
        if len(parts) < 8 or parts[3] != "TLS" or parts[6] == "UND":
            continue
        size, name = int(parts[2], 0), parts[7]
        if name.startswith("emu_tls_touch"):
            continue
        owner = re.match(r"^(?:[\w:]*::)?(\w+)\(", name)
        if owner and owner.group(1) in own and ")::" in name:
            own[owner.group(1)] += size
        else:
            common += size
    return {k: v + common for k, v in own.items()}


def _pch(compiler: str, flags: list[str], *, clang: bool = False) -> list[str]:
    """A precompiled runtime header: the flags that pick it up. Parsing the runtime is most of a small
    kernel's compile (clang: 0.57 s of 0.67 s for vector_add), and every kernel parses the same one."""
    folder = tc.cache_dir() / "pch" / _hash(tc.runtime_version(), compiler, *flags)
    # g++ finds emu_runtime.hpp.gch beside an -include'd copy of the header (and falls back to the
    # header if it does not fit). clang reads the file -include-pch names, checks that the headers it
    # was built from are unchanged, and refuses one built with other flags: it is built from the
    # package's own header, with the kernel's flags.
    built = folder / ("emu_runtime.hpp.pch" if clang else "emu_runtime.hpp.gch")
    if not built.exists():
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".build-"))
        header = tc.EMU_INCLUDE / "emu_runtime.hpp"
        if not clang:
            header = Path(shutil.copy(header, tmp / "emu_runtime.hpp"))
        with tc.building("traced build's precompiled header" if clang else "precompiled header"):
            done = subprocess.run([compiler, *flags, "-x", "c++-header", str(header), "-o", str(tmp / built.name)],
                                  capture_output=True, text=True)
        if done.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            return ["-include", "emu_runtime.hpp"]
        tc.publish_dir(tmp, folder)
    return ["-include-pch", str(built)] if clang else ["-include", str(folder / "emu_runtime.hpp")]


class CompilerFault(CompileError):
    """The compiler or the machine failed; the source may be fine."""


_COMPILER_FAULTS = ("internal compiler error", "No space left on device", "Cannot allocate memory",
                    "virtual memory exhausted", "out of memory", "Killed signal terminated program")


def _compiler_fault(done: subprocess.CompletedProcess) -> bool:
    """A failure of the compiler or the machine (a signal, no memory, a full disk), not of the source:
    such a result must not be cached as the source's compile error."""
    return done.returncode < 0 or any(text in done.stderr for text in _COMPILER_FAULTS)


def build(source: str, options=(), *, flavor: str = "gcc") -> Library:
    """Compile ``source`` (all its kernels) into a shared library, or fetch it from the cache.

    ``flavor`` "gcc" is the normal build; "io" is the clang build whose memory accesses are traced.
    """
    defines, includes = parse_options(options)
    compiler = tc.require_gxx() if flavor == "gcc" else tc.require_clang()
    key = _hash(tc.runtime_version(), flavor, compiler, source, *defines, *includes)
    final = tc.cache_dir() / "kernels" / key[:2] / key
    code = student_code(source)
    lines = tuple(code.splitlines())
    if (final / "lib.so").exists():
        meta = json.loads((final / "meta.json").read_text())
        return Library(final / "lib.so", meta["static_shared"], lines)
    if (final / "error.txt").exists():
        raise CompileError((final / "error.txt").read_text())

    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=".build-"))
    wrappers, kernels = _entry_wrappers(source)
    (tmp / "tu.cpp").write_text(rewrite(source) + "\n" + wrappers)
    # The compiler quotes offending lines from the file the #line directive names.
    (tmp / STUDENT_FILE).write_text(code)
    base = [f"-I{tc.EMU_INCLUDE}", f"-I{tc.COURSE_INCLUDE}", *includes, *defines]
    if flavor == "gcc":
        flags = [*tc.GXX_FLAGS, f"-I{tc.EMU_INCLUDE}", f"-I{tc.COURSE_INCLUDE}"]
        steps = [
            [compiler, *tc.GXX_FLAGS, *base, *_pch(compiler, flags), "-c", "tu.cpp", "-o", "tu.o"],
            # Plain link: with the sanitizer flags g++ would link its runtime, whose handlers would
            # then compete with the launcher's.
            [compiler, "-shared", "tu.o", "-o", "lib.so"],
        ]
    else:
        flags = [*tc.CLANG_FLAGS, f"-I{tc.EMU_INCLUDE}", f"-I{tc.COURSE_INCLUDE}"]
        steps = [
            [compiler, *tc.CLANG_FLAGS, *base, *_pch(compiler, flags, clang=True), "-c", "tu.cpp", "-o", "tu.o"],
            # Plain link: the coverage flags at link time would ask for a sanitizer runtime.
            [compiler, "-shared", "tu.o", "-o", "lib.so"],
        ]
    for cmd in steps:
        done = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True)
        if done.returncode != 0:
            if _compiler_fault(done):
                shutil.rmtree(tmp, ignore_errors=True)
                raise CompilerFault(f"the C++ compiler itself failed (exit {done.returncode}), not on a line of your "
                                   f"code; nothing was cached, so running the cell again retries:\n"
                                   f"{done.stderr.strip()[-2000:]}")
            message = student_diagnostics(done.stderr)
            (tmp / "error.txt").write_text(message)
            for f in ("lib.so", "tu.o"):
                (tmp / f).unlink(missing_ok=True)
            tc.publish_dir(tmp, final)
            raise CompileError(message)
    sizes = _tls_sizes(tmp / "lib.so", kernels)
    (tmp / "meta.json").write_text(json.dumps({"static_shared": sizes, "kernels": kernels}))
    (tmp / "tu.o").unlink(missing_ok=True)
    tc.publish_dir(tmp, final)
    return Library(final / "lib.so", sizes, lines)

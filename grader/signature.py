"""Kernel signatures: find a ``__global__`` function in CUDA C source and check launch arguments.

Both backends use this. CuPy packs arguments by their *Python* types and never looks at the
kernel's parameter list, so passing a Python ``int`` to an ``int`` parameter silently shifts
every later argument on a real GPU. We read the parameter list ourselves and refuse such calls
with a message that says what to pass instead, on the GPU and on the emulator alike.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from .errors import KernelArgumentError, KernelNotFoundError, KernelSourceError

# C spelling -> NumPy dtype name. bf16 has no NumPy dtype: ml_dtypes' bfloat16 (what CuPy
# accepts) or raw uint16 bits both pass for a bf16 pointer.
C_TYPES = {
    "float": "float32",
    "double": "float64",
    "__half": "float16",
    "half": "float16",
    "__nv_bfloat16": "bfloat16",
    "nv_bfloat16": "bfloat16",
    "int": "int32",
    "signed int": "int32",
    "int32_t": "int32",
    "unsigned int": "uint32",
    "unsigned": "uint32",
    "uint32_t": "uint32",
    "long long": "int64",
    "long long int": "int64",
    "int64_t": "int64",
    "long": "int64",
    "unsigned long long": "uint64",
    "unsigned long long int": "uint64",
    "uint64_t": "uint64",
    "size_t": "uint64",
    "unsigned long": "uint64",
    "short": "int16",
    "int16_t": "int16",
    "unsigned short": "uint16",
    "uint16_t": "uint16",
    "char": "int8",
    "signed char": "int8",
    "int8_t": "int8",
    "unsigned char": "uint8",
    "CUtensorMap": "uint8",  # a TMA tensor map: 128 bytes (grader.TensorMap)
    "uint8_t": "uint8",
    "bool": "bool",
}
QUALIFIERS = {"const", "volatile", "__restrict__", "__restrict", "restrict"}


@dataclass(frozen=True)
class Param:
    """One kernel parameter: ``ctype`` is the base C type, ``dtype`` its NumPy name (None for
    ``void``/unknown types), ``pointer`` whether it is passed as a device pointer."""

    name: str
    ctype: str
    dtype: str | None
    pointer: bool
    const: bool

    def describe(self) -> str:
        star = "*" if self.pointer else ""
        const = "const " if self.const else ""
        return f"{const}{self.ctype}{star} {self.name}".strip()


@dataclass(frozen=True)
class Signature:
    name: str
    params: tuple[Param, ...]
    line: int  # 1-based line of the kernel's name in the source
    extern_c: bool

    def describe(self) -> str:
        return f"{self.name}({', '.join(p.describe() for p in self.params)})"


def strip_comments(source: str) -> str:
    """Blank out comments and string literals, keeping every newline so line numbers hold."""

    def blank(match: re.Match) -> str:
        text = match.group(0)
        if text == '"C"':  # keep extern "C" readable
            return text
        if text.startswith('"') or text.startswith("'"):
            return text[0] + " " * (len(text) - 2) + text[-1]
        return re.sub(r"[^\n]", " ", text)

    pattern = r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\''
    return re.sub(pattern, blank, source, flags=re.S)


_GLOBAL = re.compile(r"__global__")


def kernel_names(source: str) -> list[str]:
    """Names of every ``__global__`` function in the source, in order."""
    clean = strip_comments(source)
    names = []
    for m in _GLOBAL.finditer(clean):
        found = _name_after(clean, m.end())
        if found:
            names.append(found[0])
    return names


def _name_after(clean: str, pos: int) -> tuple[str, int] | None:
    """The function name after ``__global__`` at ``pos``: the identifier before the first '('
    that is not a ``__launch_bounds__(...)`` argument list."""
    i = pos
    while True:
        paren = clean.find("(", i)
        if paren < 0:
            return None
        head = clean[i:paren]
        ident = re.search(r"([A-Za-z_]\w*)\s*$", head)
        if ident and ident.group(1) == "__launch_bounds__":
            close = _matching_paren(clean, paren)
            if close < 0:
                return None
            i = close + 1
            continue
        return (ident.group(1), paren) if ident else None


def _matching_paren(text: str, open_at: int) -> int:
    depth = 0
    for j in range(open_at, len(text)):
        c = text[j]
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return j
    return -1


def parse_signature(source: str, name: str) -> Signature:
    """Find ``__global__ ... name(...)`` in ``source`` and parse its parameters."""
    clean = strip_comments(source)
    for m in _GLOBAL.finditer(clean):
        found = _name_after(clean, m.end())
        if not found or found[0] != name:
            continue
        paren = found[1]
        close = _matching_paren(clean, paren)
        if close < 0:
            raise KernelSourceError(f"kernel '{name}': unbalanced parentheses in its parameter list")
        line = clean.count("\n", 0, paren) + 1
        start = max(clean.rfind(";", 0, m.start()), clean.rfind("}", 0, m.start()), clean.rfind("#", 0, m.start()))
        before = clean[start + 1 : m.start()]
        if re.search(r"\btemplate\b", before):
            raise KernelSourceError(
                f"kernel '{name}' (line {line}) is a template. A kernel launched by name must be a "
                "plain `extern \"C\" __global__` function: make the template a `__device__` helper "
                "and call it from a non-template kernel."
            )
        params = tuple(_parse_param(p, name) for p in _split_params(clean[paren + 1 : close]))
        extern_c = bool(re.search(r'extern\s*"C"', before)) or _in_extern_c_block(clean, m.start())
        return Signature(name, params, line, extern_c)
    names = kernel_names(source)
    hint = f" The source defines: {', '.join(names)}." if names else " The source has no __global__ function."
    raise KernelNotFoundError(f"no __global__ kernel named '{name}' in the source.{hint}")


def _in_extern_c_block(clean: str, pos: int) -> bool:
    for m in re.finditer(r'extern\s+"\s*C\s*"\s*\{', clean[:pos]):
        depth = 0
        for c in clean[m.end() - 1 : pos]:
            depth += (c == "{") - (c == "}")
        if depth > 0:
            return True
    return False


def _split_params(text: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for c in text:
        if c in "(<[":
            depth += 1
        elif c in ")>]":
            depth -= 1
        if c == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    parts.append("".join(cur))
    parts = [p.strip() for p in parts]
    if parts == [""] or parts == ["void"]:
        return []
    return parts


def _parse_param(text: str, kernel: str) -> Param:
    text = text.split("=")[0]  # default arguments are not allowed in kernels but parse anyway
    array = "[" in text
    text = re.sub(r"\[[^\]]*\]", "", text)
    pointer_depth = text.count("*") + (1 if array else 0)
    if "&" in text:
        raise KernelSourceError(f"kernel '{kernel}': parameter `{text.strip()}` is a reference; kernels take values or pointers")
    tokens = re.findall(r"[A-Za-z_][\w:]*", text.replace("*", " "))
    const = "const" in tokens
    tokens = [t for t in tokens if t not in QUALIFIERS]
    if not tokens:
        raise KernelSourceError(f"kernel '{kernel}': cannot read parameter `{text.strip()}`")
    if len(tokens) >= 2 and " ".join(tokens) not in C_TYPES:
        pname, ctype_tokens = tokens[-1], tokens[:-1]
    else:
        pname, ctype_tokens = "", tokens
    ctype = " ".join(ctype_tokens)
    if pointer_depth > 1:
        raise KernelSourceError(f"kernel '{kernel}': parameter `{text.strip()}` is a pointer to a pointer; pass flat arrays")
    return Param(pname, ctype, C_TYPES.get(ctype), pointer_depth == 1, const)


# --------------------------------------------------------------------------- arguments


def python_scalar_dtype(value) -> np.dtype | None:
    """The dtype CuPy sends a Python scalar as: bool->bool, int->int64, float->float64."""
    if isinstance(value, bool):
        return np.dtype(np.bool_)
    if isinstance(value, int):
        return np.dtype(np.uint64) if value >= 2**63 else np.dtype(np.int64)
    if isinstance(value, float):
        return np.dtype(np.float64)
    return None


def _dtype_name(dt: np.dtype) -> str:
    return "bfloat16" if dt.name == "bfloat16" else dt.name


def _ctor(dtype: str) -> str:
    return {"bfloat16": "ml_dtypes.bfloat16"}.get(dtype, f"np.{dtype}")


def check_args(sig: Signature, args, *, is_array, array_kind: str) -> list:
    """Validate ``args`` against ``sig`` and return them with scalars as NumPy scalars.

    ``is_array(x)`` says whether ``x`` is an array of the active backend; ``array_kind`` names
    it in messages ("a CuPy array" / "a NumPy array").
    """
    if not isinstance(args, (tuple, list)):
        raise KernelArgumentError(f"{sig.name}: args must be a tuple, got {type(args).__name__}. Write args=(a, b, n), with the trailing comma for one argument: (a,).")
    if len(args) != len(sig.params):
        raise KernelArgumentError(
            f"{sig.name} takes {len(sig.params)} argument(s) but {len(args)} were given.\n"
            f"  signature: {sig.describe()}"
        )
    out = []
    for i, (p, a) in enumerate(zip(sig.params, args)):
        where = f"{sig.name}: argument {i} (`{p.describe()}`)"
        if p.pointer:
            if not is_array(a):
                kind = type(a).__module__.split(".")[0] + "." + type(a).__name__
                extra = ""
                if type(a).__module__.startswith("numpy") and array_kind != "a NumPy array":
                    extra = " This NumPy array lives in host memory: copy it with grader.to_device(x) first."
                raise KernelArgumentError(f"{where} is a pointer, so pass {array_kind}; got {kind}.{extra}")
            if p.dtype is not None:
                got = _dtype_name(a.dtype)
                ok = got == p.dtype or (p.dtype == "bfloat16" and got == "uint16")
                if not ok:
                    raise KernelArgumentError(
                        f"{where} expects {p.dtype} data but the array is {got}. "
                        f"Convert it with x.astype({_ctor(p.dtype)}) or change the parameter type."
                    )
            if not a.flags.c_contiguous:
                raise KernelArgumentError(
                    f"{where}: the array is not C-contiguous (a transposed or sliced view), so the "
                    "kernel would read the wrong elements. Pass xp.ascontiguousarray(x)."
                )
            out.append(a)
            continue
        if is_array(a) or isinstance(a, np.ndarray):
            if getattr(a, "ndim", 1) == 0:
                a = a.dtype.type(a.item()) if not hasattr(a, "get") else np.asarray(a.get())[()]
            else:
                raise KernelArgumentError(f"{where} is a scalar; got an array of shape {tuple(a.shape)}.")
        if isinstance(a, np.generic):
            got = np.dtype(type(a))
        else:
            got = python_scalar_dtype(a)
            if got is None:
                raise KernelArgumentError(f"{where} is a scalar; got {type(a).__name__}. Pass {_ctor(p.dtype or 'int32')}(value).")
        if p.dtype is None:
            raise KernelArgumentError(f"{where}: scalar parameters of type `{p.ctype}` are not supported; use a plain C type (int, float, ...).")
        if _dtype_name(got) != p.dtype:
            py = ""
            if not isinstance(a, np.generic):
                py = f" (CuPy sends a Python {type(a).__name__} as {got.name})"
            raise KernelArgumentError(
                f"{where} is {p.dtype}, but you passed {got.name}{py}. "
                f"Wrap it: {_ctor(p.dtype)}({a!r})."
            )
        out.append(a if isinstance(a, np.generic) else got.type(a))
    return out

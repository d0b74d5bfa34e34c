"""Compile a kernel with NVRTC for real GPU architectures, with no GPU present.

``cupy.RawKernel.compile()`` needs a device, but NVRTC itself does not: CuPy's low-level
binding compiles to PTX for any architecture. CI uses this to prove every kernel of the course
builds for sm_80 (A100) and sm_90 (H100) with the compiler CuPy uses on a GPU; students get a
fast syntax check (``grader.compile_check(code)``) on a laptop.
"""
from __future__ import annotations

import os
from pathlib import Path

from .device import A100_SXM, H100_SXM
from .errors import BackendUnavailableError, CompileError
from .source import FILE_NAME, INCLUDE_DIR, format_compile_log, translation_unit

DEFAULT_ARCHS = (A100_SXM.arch, H100_SXM.arch)


def archs_for(requires: str | None) -> tuple[str, ...]:
    """What a kernel is built for: the course's default architectures, or only the one an exercise
    ``requires`` (code for sm_90a's wgmma does not build for sm_80)."""
    return (requires,) if requires else DEFAULT_ARCHS


def _nvrtc():
    try:
        from cupy_backends.cuda.libs import nvrtc
    except ImportError as exc:
        raise BackendUnavailableError(
            "the offline NVRTC check needs CuPy and NVRTC: pip install -e '.[nvrtc]' "
            f"(no GPU needed). ({exc})"
        ) from None
    return nvrtc


def cuda_include_dirs() -> list[str]:
    """Where cuda_fp16.h and friends live: the pip CUDA runtime wheel, else a toolkit."""
    dirs = []
    try:
        import nvidia

        for root in nvidia.__path__:
            dirs += [str(p) for p in sorted(Path(root).glob("cu*/include")) if (p / "cuda_fp16.h").exists()]
            dirs += [str(p) for p in sorted(Path(root).glob("cuda_runtime/include")) if (p / "cuda_fp16.h").exists()]
    except ImportError:
        pass
    for env in ("CUDA_PATH", "CUDA_HOME"):
        if os.environ.get(env):
            dirs.append(str(Path(os.environ[env]) / "include"))
    dirs.append("/usr/local/cuda/include")
    return [d for d in dirs if Path(d, "cuda_fp16.h").exists()]


def compile_check(code: str, archs=DEFAULT_ARCHS, options=(), kernel: str = "kernel") -> dict[str, int]:
    """Compile ``code`` (student source, prelude added) to PTX for each arch.

    Returns ``{arch: ptx_bytes}``; raises :class:`CompileError` with the student's line numbers.
    """
    nvrtc = _nvrtc()
    includes = [f"-I{INCLUDE_DIR}", *(f"-I{d}" for d in cuda_include_dirs())]
    sizes = {}
    for arch in archs:
        prog = nvrtc.createProgram(translation_unit(code), FILE_NAME, [], [])
        try:
            try:
                nvrtc.compileProgram(prog, [f"--gpu-architecture={arch}", "-std=c++17", *includes, *options])
            except nvrtc.NVRTCError:
                raise CompileError(format_compile_log(nvrtc.getProgramLog(prog), code, kernel, f"NVRTC ({arch})")) from None
            sizes[arch] = len(nvrtc.getPTX(prog))
        finally:
            nvrtc.destroyProgram(prog)
    return sizes

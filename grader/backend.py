"""Which machine runs the kernels: a GPU through CuPy, or the CPU emulator.

``GRADER_BACKEND=gpu|cpu`` forces a choice; by default the GPU is used when CuPy imports and
sees a device. Asking for ``gpu`` where there is none is an error, never a silent fallback:
a student timing "GPU" kernels on the emulator would learn the wrong lesson.
"""
from __future__ import annotations

import os

from .errors import BackendUnavailableError

_CHOICES = ("gpu", "cpu")
_active: str | None = None


def gpu_status() -> tuple[bool, str]:
    """(usable, reason): whether CuPy imports and a CUDA device answers."""
    try:
        import cupy
    except ImportError as exc:
        return False, f"CuPy is not installed ({exc}); install the extra for your CUDA version: pip install -e '.[cuda12]' or '.[cuda13]'"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CuPy raises its own CUDA errors when no driver is present
        return False, f"CuPy is installed but finds no CUDA driver or device ({type(exc).__name__}: {exc})"
    if count < 1:
        return False, "CuPy is installed but there is no CUDA device"
    return True, f"{count} CUDA device(s)"


def backend() -> str:
    """The active backend: ``'gpu'`` or ``'cpu'`` (the CPU emulator)."""
    global _active
    if _active is None:
        _active = _choose(os.environ.get("GRADER_BACKEND", "").strip().lower() or None)
    return _active


def set_backend(name: str | None) -> str:
    """Switch backend for this process (``None`` re-reads ``GRADER_BACKEND``/auto-detects)."""
    global _active
    _active = None if name is None else _choose(name.lower())
    return backend()


def _choose(requested: str | None) -> str:
    if requested not in (None, "auto", *_CHOICES):
        raise BackendUnavailableError(f"GRADER_BACKEND={requested!r}: choose 'gpu', 'cpu' or 'auto'")
    if requested == "cpu":
        return "cpu"
    ok, reason = gpu_status()
    if requested == "gpu" and not ok:
        raise BackendUnavailableError(
            f"the GPU backend was requested but cannot run here: {reason}. "
            "Unset GRADER_BACKEND (or set it to cpu) to use the CPU emulator."
        )
    return "gpu" if ok else "cpu"

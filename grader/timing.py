"""Timing kernels on a GPU with CUDA events (the emulator's time says nothing about a GPU's)."""
from __future__ import annotations

import statistics

from .backend import backend
from .errors import BackendUnavailableError


def gpu_time_ms(fn, reps: int = 20, warmup: int = 3) -> float:
    """Median milliseconds of ``fn()`` on the current stream, measured with CUDA events."""
    if backend() != "gpu":
        raise BackendUnavailableError("gpu_time_ms measures GPU time; the emulator's speed says nothing about a GPU")
    import cupy

    for _ in range(warmup):
        fn()
    cupy.cuda.Device().synchronize()
    times = []
    for _ in range(reps):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop))
    return statistics.median(times)

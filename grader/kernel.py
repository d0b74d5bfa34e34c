"""``grader.RawKernel``: the one way the course compiles and launches a kernel.

It behaves like ``cupy.RawKernel`` -- ``kernel(grid, block, args, shared_mem=0)`` -- on both
backends, and adds what a course needs: the parameter list is read from the source so wrong
argument types are refused with a sentence, launch limits are checked up front, and on the
emulator a launch can also check for races, count memory traffic, profile memory requests per
source line (``profile=True``: coalescing and bank conflicts), and capture ``printf``.
"""
from __future__ import annotations

import sys

from . import launch as _launch
from . import tensor_map
from .arrays import is_device_array
from .backend import backend as active_backend
from .device import H100_SXM
from .errors import BackendUnavailableError, KernelSourceError
from .signature import check_args, parse_signature
from .source import translation_unit


class RawKernel:
    """A CUDA C kernel compiled from ``code``; call it to launch.

    ``options`` are NVRTC options (``-DTILE=32`` works on both backends). The kernel compiles
    on first use, or explicitly with :meth:`compile`; compiled kernels are cached by content.
    """

    def __init__(self, code: str, name: str, options=(), *, backend: str | None = None):
        if not isinstance(code, str):
            raise KernelSourceError(f"RawKernel(code, name): code must be the kernel source as a string, got {type(code).__name__}")
        self.code = code
        self.name = name
        self.options = tuple(options)
        self.signature = parse_signature(code, name)
        if not self.signature.extern_c:
            raise KernelSourceError(
                f"kernel '{name}' (line {self.signature.line}) must be declared "
                f'`extern "C" __global__ void {name}(...)` so it can be found by name '
                "(C++ would otherwise mangle the name)."
            )
        self.backend = backend or active_backend()
        self.max_dynamic_shared_size_bytes = H100_SXM.static_shared_per_block
        self.last_launch = None  # the emulator's LaunchReport of the latest launch
        self._compiled = None

    @property
    def source(self) -> str:
        return self.code

    def compile(self) -> "RawKernel":
        if self._compiled is None:
            tu = translation_unit(self.code)
            if self.backend == "gpu":
                from .gpu import GpuKernel

                self._compiled = GpuKernel(tu, self.code, self.name, self.options)
            else:
                from . import emulator

                self._compiled = emulator.compile_kernel(tu, self.name, self.signature, self.options)
        return self

    def max_threads_per_block(self) -> int | None:
        """On a GPU, the most threads a block of this build can have (its registers decide); None on
        the emulator, which has no register file to run out of."""
        self.compile()
        return self._compiled.max_threads_per_block if self.backend == "gpu" else None

    def registers_per_thread(self) -> int | None:
        """On a GPU, the registers per thread of this build; None on the emulator."""
        self.compile()
        return self._compiled.registers if self.backend == "gpu" else None

    def __call__(self, grid, block, args, *, shared_mem=0, time_limit=None, race_check=False, count_io=False,
                 profile=False):
        if not isinstance(self.max_dynamic_shared_size_bytes, int) or not (
            0 <= self.max_dynamic_shared_size_bytes <= H100_SXM.max_shared_per_block_optin
        ):
            raise _launch.LaunchConfigError(
                f"{self.name}: max_dynamic_shared_size_bytes must be an int up to {H100_SXM.max_shared_per_block_optin}"
            )
        g, b, smem = _launch.check_launch(self.name, grid, block, shared_mem, self.max_dynamic_shared_size_bytes)
        array_kind = "a CuPy array (grader.to_device(x))" if self.backend == "gpu" else "a NumPy array"
        args, mapped = tensor_map.expand(args, self.backend)
        values = check_args(self.signature, args, is_array=lambda x: is_device_array(x, self.backend), array_kind=array_kind)
        values += mapped  # the emulator's tensor maps name these arrays by argument index
        self.compile()
        if self.backend == "gpu":
            if race_check or count_io or profile or time_limit is not None:
                raise BackendUnavailableError(
                    f"{self.name}: race_check, count_io, profile and time_limit are emulator features; "
                    "run with GRADER_BACKEND=cpu to use them."
                )
            self._compiled.launch(g, b, values, smem, self.max_dynamic_shared_size_bytes)
            return None
        report = self._compiled.launch(g, b, values, smem, time_limit=time_limit, race_check=race_check,
                                       count_io=count_io, profile=profile)
        self.last_launch = report
        if report.printed:
            sys.stdout.write(report.printed)
            sys.stdout.flush()
        return report

    def __repr__(self) -> str:
        return f"<grader.RawKernel {self.signature.describe()} on {self.backend}>"

"""The GPU backend: the translation unit goes to CuPy's RawKernel (NVRTC) unchanged."""
from __future__ import annotations

import functools
from pathlib import Path

from .device import H100_SXM
from .errors import CompileError, KernelRuntimeError, LaunchConfigError
from .source import INCLUDE_DIR, format_compile_log


def _toolkit_headers() -> list[str]:
    """A CUDA include folder with the WMMA headers (mma.h needs crt/mma.h, which the pip runtime
    wheels CuPy finds may lack), placed before CuPy's own; none if no such folder is found."""
    from .nvrtc import cuda_include_dirs

    return [f"-I{d}" for d in cuda_include_dirs() if Path(d, "crt", "mma.h").exists()][:1]


def compute_capability() -> str:
    """This GPU's compute capability as CUDA reports it ("90" on an H100)."""
    import cupy

    return str(cupy.cuda.Device().compute_capability)


class GpuKernel:
    def __init__(self, tu: str, code: str, name: str, options: tuple[str, ...]):
        import cupy

        self.name = name
        self._kernel = cupy.RawKernel(tu, name, options=(*options, f"-I{INCLUDE_DIR}", *_toolkit_headers()))
        try:
            self._kernel.compile()
        except cupy.cuda.compiler.CompileException as exc:
            raise CompileError(format_compile_log(str(exc), code, name, "NVRTC")) from None

    @property
    def static_shared_bytes(self) -> int:
        return int(self._kernel.attributes["shared_size_bytes"])

    @functools.cached_property
    def _limits(self) -> tuple[int, int]:
        attributes = self._kernel.attributes  # driver queries: once per build, not per launch
        return int(attributes["max_threads_per_block"]), int(attributes["num_regs"])

    @property
    def registers(self) -> int:
        """Registers per thread of this build."""
        return self._limits[1]

    @property
    def max_threads_per_block(self) -> int:
        """The most threads a block of this build can have: fewer than 1024 when its registers per
        thread times the threads would exceed what an SM gives one block."""
        return self._limits[0]

    def check_block(self, block) -> None:
        threads = block[0] * block[1] * block[2]
        limit, regs = self._limits
        if threads > limit:
            raise LaunchConfigError(
                f"{self.name}: block{tuple(block)} has {threads} threads, but this build can run at most {limit} "
                f"per block: it uses {regs} registers per thread, and an SM gives one block at most "
                f"{H100_SXM.registers_per_block} "
                f"({regs} x {threads} = {regs * threads}). Launch fewer threads per block, or cap the registers "
                f"with __launch_bounds__({threads}) before the kernel's name (what does not fit then spills to "
                "local memory).")

    def launch(self, grid, block, args, shared_mem, max_dynamic_shared):
        import cupy

        self.check_block(block)
        if max_dynamic_shared > H100_SXM.static_shared_per_block:
            self._kernel.max_dynamic_shared_size_bytes = max_dynamic_shared
        try:
            self._kernel(grid, block, tuple(args), shared_mem=shared_mem)
        except cupy.cuda.driver.CUDADriverError as exc:
            raise KernelRuntimeError(
                f"{self.name}: the GPU reported {exc}. Launch errors such as an illegal address "
                "leave the CUDA context unusable: restart the notebook kernel, then run the same "
                "launch on the CPU emulator (GRADER_BACKEND=cpu), which names the bad access."
            ) from None

"""grader: run and check the CUDA C kernels of *FlashAttention from scratch*.

    import grader                      # in a notebook this also registers %%cuda
    k = grader.RawKernel(code, "vector_add")
    k(grid, block, (a, b, c, np.int32(n)))

Kernels run on a GPU through CuPy when one is present, otherwise on the course's CPU emulator
(``GRADER_BACKEND=gpu|cpu`` to choose). Importing this needs only NumPy.
"""
from .arrays import array_module, empty, is_device_array, never_written, to_device, to_host, zeros
from .backend import backend, gpu_status, set_backend
from .benchmark import bench
from .checks import CheckFailed, check
from .errors import (
    BackendUnavailableError,
    BarrierError,
    CompileError,
    CourseError,
    KernelArgumentError,
    KernelAssertionError,
    KernelFault,
    KernelNotFoundError,
    KernelRuntimeError,
    KernelSourceError,
    KernelTimeoutError,
    LaunchConfigError,
    OutOfBoundsError,
    RaceConditionError,
)
from .kernel import RawKernel
from .launch import ceil_div
from .magic import load_ipython_extension, register_if_interactive
from .nvrtc import compile_check
from .tensor_map import TensorMap
from .timing import gpu_time_ms

__all__ = [
    "array_module",
    "empty",
    "is_device_array",
    "never_written",
    "to_device",
    "to_host",
    "zeros",
    "backend",
    "gpu_status",
    "set_backend",
    "bench",
    "CheckFailed",
    "check",
    "BackendUnavailableError",
    "BarrierError",
    "CompileError",
    "CourseError",
    "KernelArgumentError",
    "KernelAssertionError",
    "KernelFault",
    "KernelNotFoundError",
    "KernelRuntimeError",
    "KernelSourceError",
    "KernelTimeoutError",
    "LaunchConfigError",
    "OutOfBoundsError",
    "RaceConditionError",
    "RawKernel",
    "TensorMap",
    "ceil_div",
    "load_ipython_extension",
    "compile_check",
    "gpu_time_ms",
    "xp",
]


def __getattr__(name):
    # `grader.xp` follows the backend, which may be chosen after import.
    if name == "xp":
        return array_module()
    raise AttributeError(f"module 'grader' has no attribute {name!r}")


register_if_interactive()

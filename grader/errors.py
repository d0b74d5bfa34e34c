"""Exceptions the course raises. Each message says what to change; none needs a traceback."""


class CourseError(Exception):
    """Base class: a mistake in a kernel or in how it is launched, explained for a student."""


class KernelSourceError(CourseError):
    """The kernel source cannot be used as written (template kernel, unreadable parameter...)."""


class KernelNotFoundError(CourseError):
    """No ``__global__`` function of the requested name."""


class CompileError(CourseError):
    """The compiler rejected the kernel; the message holds its diagnostics on the student's lines."""


class KernelArgumentError(CourseError, TypeError):
    """An argument does not match the kernel's parameter (dtype, pointer vs scalar, count)."""


class LaunchConfigError(CourseError, ValueError):
    """Grid, block or shared-memory size outside what a GPU allows."""


class BackendUnavailableError(CourseError, RuntimeError):
    """The requested backend cannot run on this machine."""


class KernelRuntimeError(CourseError, RuntimeError):
    """The kernel failed while running: out-of-bounds access, deadlock, time limit, assert, trap."""


class KernelFault(KernelRuntimeError):
    """A fault inside a running kernel, located where the backend can tell.

    ``kernel`` the kernel's name; ``block`` and ``thread`` the (x, y, z) indices of the first
    offending thread (None where unknown, e.g. on a GPU); ``line`` the 1-based line in the
    student's source (None where unknown).
    """

    def __init__(self, message, *, kernel=None, block=None, thread=None, line=None):
        super().__init__(message)
        self.kernel, self.block, self.thread, self.line = kernel, block, thread, line


class OutOfBoundsError(KernelFault):
    """A read or write outside a global array, or a shared/local array index out of range."""


class BarrierError(KernelFault):
    """Threads wait at different barriers (divergent __syncthreads) or a warp collective
    that some lanes of its mask never reach: the kernel would hang on a GPU."""


class KernelTimeoutError(KernelFault):
    """The launch ran past its time limit (usually an infinite loop)."""


class KernelAssertionError(KernelFault):
    """A device-side ``assert`` failed or ``__trap()`` was called."""


class RaceConditionError(KernelFault):
    """Threads race on memory: the race detector saw two unordered accesses to one address (at
    least one a plain write), or two legal thread schedules gave different results.
    ``explained`` is True when the message already says how to fix it."""

    explained = False

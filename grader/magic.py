"""The ``%%cuda NAME`` cell magic and clean error display in notebooks.

``%%cuda vector_add`` compiles the cell on the active backend and binds ``vector_add`` to a
:class:`grader.RawKernel` (which keeps the source for the checks). ``%%triton flash_forward``
loads a Triton cell the same way (module 12). Options after the name are
passed to the compiler: ``%%cuda matmul_tiled -DTILE=16``. Course errors (compile errors,
wrong arguments, out-of-bounds accesses...) show as their message, not a wall of traceback.
"""
from __future__ import annotations

import shlex

from .errors import CourseError
from .source import cell_code


def _show_course_error(shell, etype, evalue, tb, tb_offset=None):
    # The message already says what to change; the traceback would only show our internals.
    # _showtraceback is what Jupyter kernels override to send an error message (ename, evalue),
    # so notebooks, nbclient and nbgrader still see the cell as failed.
    shell._showtraceback(etype, evalue, [f"{etype.__name__}: {evalue}"])


def cuda(line: str, cell: str):
    from IPython import get_ipython

    from .kernel import RawKernel

    words = shlex.split(line)
    if not words:
        raise CourseError("usage: %%cuda KERNEL_NAME [compiler options]; the name must match the __global__ function in the cell")
    name, options = words[0], tuple(words[1:])
    namespace = get_ipython().user_ns
    # Line numbers in every message count the %%cuda line as line 1, as the editor does.
    code = cell_code(cell)
    # Bind the name even when the cell does not build, so a check cell below reports the
    # compile error itself instead of "name is not defined".
    namespace[name] = code
    kernel = RawKernel(code, name, options=options)
    namespace[name] = kernel
    kernel.compile()


def triton(line: str, cell: str):
    """``%%triton NAME``: import the cell as a fresh module (Triton's interpreter on a machine without
    a GPU) and bind ``NAME`` to a :class:`grader.triton_support.TritonProgram` calling its launcher."""
    from IPython import get_ipython

    from .triton_support import TritonProgram

    words = shlex.split(line)
    if not words:
        raise CourseError("usage: %%triton LAUNCHER_NAME; the cell must define a Python function of that name "
                          "that launches its @triton.jit kernels")
    program = TritonProgram(cell, words[0])
    get_ipython().user_ns[words[0]] = program
    program.load()


def load_ipython_extension(ipython) -> None:
    ipython.register_magic_function(cuda, magic_kind="cell", magic_name="cuda")
    ipython.register_magic_function(triton, magic_kind="cell", magic_name="triton")
    ipython.set_custom_exc((CourseError,), _show_course_error)


def register_if_interactive() -> None:
    """Register the magic when ``grader`` is imported inside IPython/Jupyter."""
    import sys

    ipython_module = sys.modules.get("IPython")  # never import IPython ourselves: not on GPU boxes
    ip = ipython_module.get_ipython() if ipython_module else None
    if ip is not None:
        load_ipython_extension(ip)

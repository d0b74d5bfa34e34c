"""%%cuda in a real IPython shell: binding, compile errors without tracebacks, and checks."""
import numpy as np
import pytest

IPython = pytest.importorskip("IPython")


@pytest.fixture
def shell():
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    ip.run_cell("import grader; grader.load_ipython_extension(get_ipython()); grader.set_backend('cpu')")
    yield ip
    InteractiveShell.clear_instance()


def test_cell_binds_a_kernel_that_keeps_its_source(shell):
    result = shell.run_cell(
        '%%cuda twice\nextern "C" __global__ void twice(float* x, int n) {\n'
        '    int i = threadIdx.x; if (i < n) x[i] *= 2.0f;\n}\n'
    )
    assert result.success
    k = shell.user_ns["twice"]
    assert "x[i] *= 2.0f" in k.code
    x = np.arange(4, dtype=np.float32)
    k(1, 32, (x, np.int32(4)))
    assert x.tolist() == [0, 2, 4, 6]


def test_compile_error_shows_message_not_traceback(shell, capsys):
    result = shell.run_cell('%%cuda broken\nextern "C" __global__ void broken(float* x) {\n    x[0] = y;\n}\n')
    assert not result.success
    out = capsys.readouterr()
    text = out.out + out.err
    assert "CompileError" in text and "line 3" in text  # `x[0] = y;` is the cell's third line
    assert "Traceback" not in text and "site-packages" not in text
    # the name is still bound, so a check cell reports the compile error instead of a NameError
    assert isinstance(shell.user_ns["broken"], str) or hasattr(shell.user_ns["broken"], "code")


def test_usage_error_without_a_name(shell, capsys):
    result = shell.run_cell("%%cuda\nint x;\n")
    assert not result.success
    assert "usage: %%cuda KERNEL_NAME" in capsys.readouterr().out


def _line_of(cell: str, needle: str) -> int:
    """The line number the notebook editor shows for the line holding ``needle`` (1-based,
    the %%cuda line is line 1)."""
    return next(i for i, line in enumerate(cell.split("\n"), 1) if needle in line)


def test_compile_error_line_numbers_count_the_magic_line(shell):
    cell = ('%%cuda numbered\n// a comment\nextern "C" __global__ void numbered(float* x, int n) {\n'
            '    int i = threadIdx.x;\n    if (i < n) x[i] = undeclared_thing;\n}\n')
    result = shell.run_cell(cell)
    assert not result.success
    message = str(result.error_in_exec)
    want = _line_of(cell, "undeclared_thing")
    assert want == 5
    assert f"line {want}:" in message and f"line {want - 1}:" not in message, message
    # the check cell below sees the same numbering through the name bound to the cell
    bound = shell.user_ns["numbered"]
    code = getattr(bound, "code", bound)
    assert code.split("\n")[want - 1].strip().startswith("if (i < n)")


def test_runtime_fault_line_numbers_count_the_magic_line(shell):
    cell = ('%%cuda fails_here\nextern "C" __global__ void fails_here(float* x, int n) {\n'
            '    int i = threadIdx.x;\n\n    assert(i >= n);\n    x[0] = 1.0f;\n}\n')
    assert shell.run_cell(cell).success
    k = shell.user_ns["fails_here"]
    from grader.errors import KernelFault

    with pytest.raises(KernelFault) as err:
        k(1, 1, (np.zeros(4, np.float32), np.int32(4)))
    assert err.value.line == _line_of(cell, "assert(i >= n)") == 5, str(err.value)

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
    assert "CompileError" in text and "line 2" in text
    assert "Traceback" not in text and "site-packages" not in text
    # the name is still bound, so a check cell reports the compile error instead of a NameError
    assert isinstance(shell.user_ns["broken"], str) or hasattr(shell.user_ns["broken"], "code")


def test_usage_error_without_a_name(shell, capsys):
    result = shell.run_cell("%%cuda\nint x;\n")
    assert not result.success
    assert "usage: %%cuda KERNEL_NAME" in capsys.readouterr().out

"""Unit tests of the course's nbgrader preprocessors and of how nbgrader_config.py wires them."""
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output
from traitlets.config.loader import PyFileConfigLoader

from grader.classroom import buggy_answers, inject_bug
from grader.course import ROOT
from grader.nbgrader_cuda import ClearSolutionsCuda, HideHiddenTestTracebacks, LimitOutputBytes
from nbgrader_cells import nbgrader_meta

CUDA_SOLUTION = """\
%%cuda row_sum -DTILE=16
// Hint: one thread per row.
extern "C" __global__ void row_sum(const float* x, float* out, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    // BEGIN SOLUTION
    if (r < rows) {
        float acc = 0.0f;
        for (int c = 0; c < cols; ++c) acc += x[r * cols + c];
        out[r] = acc;
    }
    // END SOLUTION
}"""

CUDA_STUB = """\
%%cuda row_sum -DTILE=16
// Hint: one thread per row.
extern "C" __global__ void row_sum(const float* x, float* out, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    // YOUR CODE HERE
}"""

CUDA_NESTED = """\
%%cuda scale
extern "C" __global__ void scale(float* x, int n) {
    int i = threadIdx.x;
    if (i < n) {
        // BEGIN SOLUTION
        x[i] *= 2.0f;
        // END SOLUTION
    }
}"""

CUDA_NESTED_STUB = """\
%%cuda scale
extern "C" __global__ void scale(float* x, int n) {
    int i = threadIdx.x;
    if (i < n) {
        // YOUR CODE HERE
    }
}"""

PY_SOLUTION = """\
def softmax(x):
    ### BEGIN SOLUTION
    e = np.exp(x - x.max())
    return e / e.sum()
    ### END SOLUTION"""

PY_STUB = """\
def softmax(x):
    # YOUR CODE HERE
    raise NotImplementedError()"""

EXAMPLE = """\
%%cuda iota
extern "C" __global__ void iota(int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = i;
}"""


def _notebook():
    nb = new_notebook()
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    nb.cells = [
        new_markdown_cell("# A module"),
        new_code_cell(EXAMPLE),  # not an answer cell: left alone
        new_code_cell(CUDA_SOLUTION, metadata=nbgrader_meta("row_sum_kernel", solution=True)),
        new_code_cell(CUDA_NESTED, metadata=nbgrader_meta("scale_kernel", solution=True)),
        new_code_cell("%%cuda whole\nextern \"C\" __global__ void whole(float* x) { x[0] = 1.0f; }",
                      metadata=nbgrader_meta("whole_kernel", solution=True)),
        new_code_cell(PY_SOLUTION, metadata=nbgrader_meta("softmax_py", solution=True)),
        new_code_cell("x = 1", metadata=nbgrader_meta("py_whole", solution=True)),
        new_markdown_cell("Explain.", metadata=nbgrader_meta("explain", solution=True)),
    ]
    return nb


def _stubbed():
    nb, _ = ClearSolutionsCuda().preprocess(_notebook(), {})
    return [c.source for c in nb.cells]


def test_cuda_cells_get_a_cuda_stub_and_keep_what_is_outside_the_region():
    src = _stubbed()
    assert src[2] == CUDA_STUB
    assert src[3] == CUDA_NESTED_STUB  # indentation of the BEGIN line is kept


def test_cells_without_a_solution_region():
    src = _stubbed()
    assert src[1] == EXAMPLE  # not an answer cell
    assert src[4] == "%%cuda whole\n// YOUR CODE HERE"  # whole-cell answer keeps its magic line
    assert src[6] == "# YOUR CODE HERE\nraise NotImplementedError()"
    assert src[7] == "YOUR ANSWER HERE"


def test_python_cells_keep_nbgraders_stock_stub():
    assert _stubbed()[5] == PY_STUB


def test_region_outside_an_answer_cell_is_refused():
    nb = _notebook()
    nb.cells[2].metadata = {}
    with pytest.raises(RuntimeError, match="non-solution cell"):
        ClearSolutionsCuda().preprocess(nb, {})


def test_unterminated_region_is_refused():
    nb = _notebook()
    nb.cells[2].source = CUDA_SOLUTION.replace("    // END SOLUTION\n", "")
    with pytest.raises(RuntimeError, match="no end solution"):
        ClearSolutionsCuda().preprocess(nb, {})


# ------------------------------------------------------------------ output byte cap


def _cell_with(*outputs):
    cell = new_code_cell("print('x' * 20_000_000)")
    cell.outputs = list(outputs)
    return cell


def _size(cell):
    total = 0
    for o in cell.outputs:
        if o.output_type == "stream":
            total += len(o.text.encode())
        elif o.output_type == "error":
            total += len((o.ename + o.evalue + "".join(o.traceback)).encode())
        else:
            total += sum(len(str(v).encode()) for v in o.data.values())
    return total


def test_a_20_mb_line_is_cut_to_the_byte_cap():
    cell = _cell_with(new_output("stream", name="stdout", text="x" * 20_000_000 + "\n"))
    pp = LimitOutputBytes(max_bytes=10_000)
    cell, _ = pp.preprocess_cell(cell, {}, 0)
    assert _size(cell) < 10_000 + 200
    assert "output truncated: 19990001 more bytes" in cell.outputs[-1].text
    assert cell.outputs[-1].name == "stdout"  # the note is never read as a failure


def test_errors_survive_the_cap_and_multibyte_text_is_cut_cleanly():
    cell = _cell_with(
        new_output("stream", name="stdout", text="é" * 50_000),
        new_output("error", ename="CheckFailed", evalue="case 'n=1' failed " + "y" * 50_000,
                   traceback=["line"] * 10),
    )
    cell, _ = LimitOutputBytes(max_bytes=1001).preprocess_cell(cell, {}, 0)
    kinds = [o.output_type for o in cell.outputs]
    assert kinds == ["stream", "error", "stream"]  # a failed test stays failed
    assert cell.outputs[0].text == "é" * 500  # 1000 bytes, no half character
    assert cell.outputs[1].evalue.startswith("case 'n=1' failed")
    assert _size(cell) < 2 * 1001 + 200


def test_plots_have_their_own_budget():
    png = {"text/plain": "<Figure size 640x480 with 1 Axes>", "image/png": "A" * 90_000}
    cell = _cell_with(new_output("display_data", data=dict(png)), new_output("display_data", data=dict(png)))
    cell, _ = LimitOutputBytes(max_bytes=1000, max_rich_bytes=100_000).preprocess_cell(cell, {}, 0)
    assert "image/png" in cell.outputs[0].data  # the first plot fits
    assert list(cell.outputs[1].data) == ["text/plain"]  # the second is over the budget
    assert "output truncated: 90000 more bytes" in cell.outputs[-1].text


def test_small_outputs_are_untouched():
    cell = _cell_with(new_output("stream", name="stdout", text="ok\n"))
    cell, _ = LimitOutputBytes(max_bytes=100).preprocess_cell(cell, {}, 0)
    assert [o.text for o in cell.outputs] == ["ok\n"]


def test_hidden_test_tracebacks_are_cut_to_the_message():
    cell = new_code_cell("# more cases\n### BEGIN HIDDEN TESTS\ncheck('k', k, hidden=True)\n### END HIDDEN TESTS")
    cell.outputs = [new_output("error", ename="CheckFailed", evalue="k: case 'big' failed",
                               traceback=["----> 3 check('k', k, hidden=True)", "CheckFailed: k: case 'big' failed"])]
    cell, _ = HideHiddenTestTracebacks().preprocess_cell(cell, {}, 0)
    assert cell.outputs[0].traceback == ["\x1b[0;31mCheckFailed\x1b[0m: k: case 'big' failed"]
    visible = new_code_cell("check('k', k)")
    visible.outputs = [new_output("error", ename="E", evalue="v", traceback=["a", "b"])]
    visible, _ = HideHiddenTestTracebacks().preprocess_cell(visible, {}, 0)
    assert visible.outputs[0].traceback == ["a", "b"]


# ------------------------------------------------------------------ the demo's bug


def test_inject_bug_shifts_the_first_bound_of_the_solution_region():
    buggy, what = inject_bug(CUDA_SOLUTION)
    assert "if (r <= rows) {" in buggy
    assert buggy.count("<=") == 1
    assert what == "off-by-one on line 6 of the cell (solution region): `<` -> `<=`"  # no solution line quoted
    assert inject_bug(EXAMPLE)[0] == EXAMPLE.replace("i < n", "i <= n")  # no region: anywhere
    assert inject_bug("%%cuda k\nvoid k(int* x) { x[0] = 1; }  // a < b") is None
    answers, what = buggy_answers({"py": PY_SOLUTION, "k": CUDA_NESTED})
    assert answers["py"] == PY_SOLUTION and answers["k"] == CUDA_NESTED.replace("i < n", "i <= n")
    assert what == "scale: off-by-one: `if (i < n) {` -> `if (i <= n) {`"


# ------------------------------------------------------------------ nbgrader_config.py


@pytest.fixture(scope="module")
def config():
    return PyFileConfigLoader("nbgrader_config.py", path=str(ROOT)).load_config()


def test_config_maps_the_course_folders(config):
    cd = config.CourseDirectory
    assert (cd.source_directory, cd.release_directory, cd.solution_directory) == ("notebooks", "exercises", "solutions")
    assert (cd.submitted_directory, cd.autograded_directory, cd.feedback_directory) == (
        "grading/submitted", "grading/autograded", "grading/feedback")
    assert cd.db_url == "sqlite:///grading/gradebook.db"
    assert config.Execute.timeout >= 60 and config.Execute.interrupt_on_timeout


def test_config_wires_the_preprocessors(config):
    from nbgrader.preprocessors import ClearHiddenTests, ClearSolutions, Execute, SaveAutoGrades

    assign = config.GenerateAssignment.preprocessors
    assert ClearSolutionsCuda in assign and ClearSolutions not in assign
    assert Execute not in config.GenerateSolution.preprocessors
    auto = config.Autograde.autograde_preprocessors
    saves = next(i for i, pp in enumerate(auto) if issubclass(pp, SaveAutoGrades))  # KeepCleanGrades
    assert saves < auto.index(LimitOutputBytes)  # capping never changes a grade
    feedback = config.GenerateFeedback.preprocessors
    hidden = next(i for i, pp in enumerate(feedback) if issubclass(pp, ClearHiddenTests))
    assert feedback.index(HideHiddenTestTracebacks) < hidden
    assert LimitOutputBytes in feedback

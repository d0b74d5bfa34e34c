"""End to end through nbgrader's own commands, with the repository's nbgrader_config.py, in
temporary course directories (the repository's gradebook is never touched).

* A pure-Python course (fast, no kernels): full marks, zero, a wrong answer with its message,
  a 20 MB print, a hanging cell and a crashing kernel, graded in one `nbgrader autograde`.
* Module 00 on the active backend through `grader.classroom.demo`: the three demo students.
"""
import html
import re
import shutil

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell

from grader import classroom
from grader.course import ROOT, notebook_of
from nbgrader_cells import adding_notebook, nbgrader_meta

HIDDEN_MARK = "hidden_probe_9431"  # appears only in the hidden test's source


def _dummy_notebook():
    return adding_notebook(
        new_markdown_cell("# Adding", id="intro"),
        new_code_cell('assert add(1, 2) == 3, "add(1, 2) should be 3; check the operator"',
                      metadata=nbgrader_meta("add_visible", grade=True, locked=True, points=1), id="visible"),
        new_code_cell("# Grading runs more cases here.\n### BEGIN HIDDEN TESTS\n"
                      f"{HIDDEN_MARK} = add(20, 22)\n"
                      f'assert {HIDDEN_MARK} == 42, "add is wrong on a case you cannot see"\n'
                      "### END HIDDEN TESTS",
                      metadata=nbgrader_meta("add_hidden", grade=True, locked=True, points=2), id="hidden"),
    )


def _with_cell(nb, source, after=1):
    nb = dict(nb, cells=list(nb["cells"]))
    nb["cells"].insert(after + 1, {"cell_type": "code", "id": "student-extra", "metadata": {},
                                   "execution_count": None, "outputs": [], "source": source})
    return nb


@pytest.fixture(scope="session")
def dummy_course(tmp_path_factory):
    course = tmp_path_factory.mktemp("dummy-course")
    shutil.copyfile(ROOT / classroom.CONFIG, course / classroom.CONFIG)
    (course / "notebooks" / "adding").mkdir(parents=True)
    nbformat.write(_dummy_notebook(), course / "notebooks" / "adding" / "adding.ipynb")
    classroom.nbgrader(["generate_assignment", "adding"], course)

    released = classroom.read_nb(course / "exercises" / "adding" / "adding.ipynb")
    right = {"add": "def add(a, b):\n    return a + b"}
    students = {
        "ada": classroom.fill_answers(released, right),
        "blank": released,
        "wrong": classroom.fill_answers(released, {"add": "def add(a, b):\n    return a - b"}),
        "loud": _with_cell(classroom.fill_answers(released, right), 'print("x" * 20_000_000)'),
        "hang": classroom.fill_answers(released, {"add": "while True:\n    pass\ndef add(a, b):\n    return a + b"}),
        "crash": _with_cell(classroom.fill_answers(released, right), "import os\nos._exit(1)"),
    }
    for name, nb in students.items():
        classroom.submit(course, name, "adding", nb, "adding.ipynb")
    graded = classroom.nbgrader(["autograde", "*", "--force", "--Execute.timeout=3"], course, check=False)
    classroom.nbgrader(["generate_feedback", "*", "--force"], course)
    classroom.nbgrader(["export", "--to", "grades.csv"], course)
    return course, graded, classroom.scores(course)


def _feedback(course, student, module="adding"):
    return (course / "grading" / "feedback" / student / module / f"{module}.html").read_text()


def test_scores_full_zero_and_partial(dummy_course):
    course, _, table = dummy_course
    got = {s: (row["adding"].score, row["adding"].max_score) for s, row in table.items()}
    assert got["ada"] == (3, 3)
    assert got["blank"] == (0, 3)
    assert got["wrong"] == (0, 3)
    assert got["loud"] == (3, 3)  # capping the output never changes a grade
    assert got["hang"] == (0, 3)
    rows = {(r["student_id"], r["assignment"]): float(r["score"]) for r in classroom.read_csv(course / "grades.csv")}
    assert rows[("ada", "adding")] == 3 and rows[("blank", "adding")] == 0


def test_a_crashing_kernel_is_flagged_and_the_others_are_graded(dummy_course):
    course, graded, table = dummy_course
    assert graded.returncode == 1  # nbgrader reports the failure...
    assert "There was an error processing assignment 'adding' for student 'crash'" in graded.stdout + graded.stderr
    assert table["crash"]["adding"].needs_manual_grade  # ...flags the student for manual grading
    assert not any(row["adding"].needs_manual_grade for s, row in table.items() if s != "crash")
    assert not (course / "grading" / "feedback" / "crash" / "adding").exists()


def test_wrong_answer_feedback_shows_the_message_but_not_the_hidden_test(dummy_course):
    course, _, _ = dummy_course
    page = _feedback(course, "wrong")
    assert "add(1, 2) should be 3; check the operator" in page
    assert "add is wrong on a case you cannot see" in page  # the hidden test's message...
    for student in ("ada", "blank", "wrong", "loud", "hang"):
        page = _feedback(course, student)
        assert HIDDEN_MARK not in page and "BEGIN HIDDEN TESTS" not in page  # ...never its source


def test_hanging_cell_is_interrupted(dummy_course):
    course, _, _ = dummy_course
    assert "CellTimeoutError" in _feedback(course, "hang")


def test_output_is_capped_in_bytes(dummy_course):
    course, _, _ = dummy_course
    autograded = course / "grading" / "autograded" / "loud" / "adding" / "adding.ipynb"
    assert autograded.stat().st_size < 500_000
    page = _feedback(course, "loud")
    assert len(page.encode()) < 1_500_000 and "x" * 200_000 not in page
    assert "output truncated" in page


# ------------------------------------------------------------------ module 00, the real thing


@pytest.fixture(scope="session")
def demo_00(tmp_path_factory):
    return classroom.demo(modules=["00_launching_kernels"], out=tmp_path_factory.mktemp("demo"), quiet=True)


def test_demo_grades_module_00(demo_00):
    m = "00_launching_kernels"
    scores = demo_00["scores"]
    assert (scores["ada"][m].score, scores["ada"][m].max_score) == (6, 6)
    assert scores["blank"][m].score == 0
    assert 0 < scores["bug"][m].score < 6
    assert demo_00["flagged"] == [] and demo_00["ok"]
    assert demo_00["bugs"][m].startswith("vector_add: off-by-one")
    assert "ada" in demo_00["table"] and demo_00["csv"].exists()


def _text(html_path):
    """What a student reads in a feedback page: tags stripped, entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", "", html_path.read_text()))


def _hidden_lines(notebook):
    lines, inside = [], False
    for cell in nbformat.read(notebook, as_version=4).cells:
        for line in cell.source.splitlines():
            if "BEGIN HIDDEN TESTS" in line:
                inside = True
            elif "END HIDDEN TESTS" in line:
                inside = False
            elif inside and line.strip():
                lines.append(line.strip())
    return lines


def test_demo_feedback_explains_the_bug_and_hides_the_hidden_tests(demo_00):
    m = "00_launching_kernels"
    feedback = demo_00["feedback"]
    text = _text(feedback / "bug" / m / "launching_kernels.html")
    assert "vector_add: case 'one_element' (n=1, seed=1): the kernel failed while running" in text
    hidden = _hidden_lines(notebook_of(m))
    assert hidden
    for student in ("ada", "blank", "bug"):
        text = _text(feedback / student / m / "launching_kernels.html")
        assert "BEGIN HIDDEN TESTS" not in text
        for line in hidden:
            assert line not in text, f"hidden test source in {student}'s feedback: {line}"

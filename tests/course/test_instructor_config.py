"""nbgrader_config.py takes care of the instructor pitfalls found in JupyterLab and Formgrader:
`alembic` found without the venv on PATH, an exchange inside the course, no "checksum has
changed!" for hidden-test cells handed in as released (but still for changed ones), no
`display_data_priority` warnings in feedback, and the grading seed from grading/seed."""
import os
import shutil
import sqlite3
import subprocess
import sys

import nbformat
import pytest
from traitlets.config.loader import PyFileConfigLoader

from grader import classroom
from grader.course import ROOT

from test_autograde import _dummy_notebook

BARE_PATH = "/usr/bin:/bin"  # no virtual environment on it


def _nbgrader_bare(args, course):
    """nbgrader as `.venv/bin/nbgrader` run from a shell whose PATH lacks the venv."""
    env = dict(os.environ, PATH=BARE_PATH)
    return subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="session")
def course(tmp_path_factory):
    course = tmp_path_factory.mktemp("config-course")
    shutil.copyfile(ROOT / classroom.CONFIG, course / classroom.CONFIG)
    (course / "notebooks" / "adding").mkdir(parents=True)
    nbformat.write(_dummy_notebook(), course / "notebooks" / "adding" / "adding.ipynb")
    logs = {"generate": _nbgrader_bare(["generate_assignment", "adding"], course)}
    released = classroom.read_nb(course / "exercises" / "adding" / "adding.ipynb")
    right = {"add": "def add(a, b):\n    return a + b"}
    classroom.submit(course, "ada", "adding", classroom.fill_answers(released, right), "adding.ipynb")
    tampered = classroom.fill_answers(released, right)
    for cell in tampered["cells"]:
        if cell.get("id") == "hidden":
            cell["source"] = "pass  # nothing to see"
    classroom.submit(course, "eve", "adding", tampered, "adding.ipynb")
    logs["autograde"] = _nbgrader_bare(["autograde", "adding"], course)
    logs["feedback"] = _nbgrader_bare(["generate_feedback", "adding"], course)
    logs["list"] = _nbgrader_bare(["list"], course)
    return course, logs


def _log(proc):
    return proc.stdout + proc.stderr


def test_alembic_is_found_without_the_venv_on_path(course):
    path, logs = course
    for step in ("generate", "autograde", "feedback"):
        assert logs[step].returncode == 0, _log(logs[step])[-3000:]
    with sqlite3.connect(path / "grading" / "gradebook.db") as db:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "alembic_version" in tables


def test_the_exchange_lives_inside_the_course(course):
    path, logs = course
    assert (path / "grading" / "exchange").is_dir()
    text = _log(logs["list"])
    assert logs["list"].returncode == 0, text
    assert "Unwritable directory" not in text and "CRITICAL" not in text


def test_checksum_warning_only_for_cells_a_student_changed(course):
    _, logs = course
    text = _log(logs["autograde"])
    warned = [line for line in text.splitlines() if "has changed!" in line]
    assert len(warned) == 1 and "add_hidden" in warned[0], "\n".join(warned)
    # eve changed the hidden-test cell (warned and restored); ada handed it in as released
    assert "Autograding" in text


def test_tampered_hidden_cell_is_still_restored_and_graded(course):
    path, _ = course
    table = classroom.scores(path)
    assert table["ada"]["adding"].score == 3 and table["eve"]["adding"].score == 3


def test_feedback_logs_no_display_data_priority_warnings(course):
    _, logs = course
    assert "not recognized" not in _log(logs["feedback"])


def test_grading_seed_from_grading_seed_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GRADER_SEED", raising=False)
    monkeypatch.setenv("PATH", os.environ.get("PATH", ""))  # restored after the config edits it
    (tmp_path / "grading").mkdir()
    (tmp_path / "grading" / "seed").write_text("918273645\n")
    PyFileConfigLoader(classroom.CONFIG, path=str(ROOT)).load_config()
    assert os.environ["GRADER_SEED"] == "918273645"
    assert os.environ["PATH"].split(os.pathsep)[0] == os.path.dirname(sys.executable)
    monkeypatch.setenv("GRADER_SEED", "1")  # the environment wins over the file
    PyFileConfigLoader(classroom.CONFIG, path=str(ROOT)).load_config()
    assert os.environ["GRADER_SEED"] == "1"

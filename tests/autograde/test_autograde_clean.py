"""End to end: an adversarial class of module 00 graded by ``python -m grader autograde``,
then nbgrader's own ``generate_feedback`` and ``export`` (the documented instructor commands).

Every cheat must get the score its honest work earns, every victim keeps its score, no file
outside the sandbox changes, no process outlives the run. One run (a session-scoped fixture),
several assertions; about a minute on two cores (the first run also builds the sandbox's
emulator runtime, about 25 s, reused by later runs with the same grader files).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("nbgrader")

from grader.autograde import autograde  # noqa: E402
from grader.autograde.engine import derive_seed  # noqa: E402
from grader.autograde.sandbox import Limits, bwrap_path  # noqa: E402
from grader.classroom import read_csv  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
import corpus  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MODULE = corpus.MODULE
LIMITS = Limits(cpu_s=30, launch_s=2.5)  # the wall-clock cap far above, as in a real run


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _env() -> dict:
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env.pop("GRADER_SEED", None)
    return env


@pytest.fixture(scope="session")
def graded(tmp_path_factory):
    course = tmp_path_factory.mktemp("adversarial-course")
    for d in (f"exercises/{MODULE}", f"notebooks/{MODULE}"):
        shutil.copytree(ROOT / d, course / d)
    shutil.copytree(ROOT / "grader", course / "grader", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy(ROOT / "nbgrader_config.py", course)
    (course / "grading").mkdir()
    expected = corpus.build(course)
    # What a stock `nbgrader autograde` run had given two cheats (recorded in the gradebook
    # before the clean run): full marks. The clean run must overwrite and report them.
    _fake_in_notebook(course, {"patch_check": 6.0, "fake_rawkernel": 6.0, "ada": 6.0})
    protected = {p: _digest(p) for p in [course / "grader" / "checks.py", course / "nbgrader_config.py",
                                         *sorted((course / "grading" / "submitted").rglob("*.ipynb"))]}
    t0 = time.monotonic()
    # launch_s: short, so the hangs cost little; the cases of 2^24 threads get four times it
    out = autograde(MODULE, root=course, workers=2, seed=20261124, quiet=True, limits=LIMITS)
    seconds = time.monotonic() - t0
    time.sleep(1.5)  # a daemon left behind would write within a second
    feedback = subprocess.run([sys.executable, "-m", "nbgrader", "generate_feedback", MODULE, "--force"],
                              cwd=course, env=_env(), capture_output=True, text=True)
    export = subprocess.run([sys.executable, "-m", "nbgrader", "export", "--to", "grading/grades.csv"],
                            cwd=course, env=_env(), capture_output=True, text=True)
    return dict(course=course, out=out, expected=expected, protected=protected, seconds=seconds,
                feedback=feedback, export=export)


def _fake_in_notebook(course: Path, scores: dict) -> None:
    from grader.autograde import _ensure_assignment
    from grader.autograde.notebook import load_layout
    from nbgrader.api import Gradebook

    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")
    layouts = load_layout(course, MODULE)
    with Gradebook("sqlite:///" + str(course / "grading" / "gradebook.db")) as gb:
        _ensure_assignment(gb, MODULE, layouts)
        for student, total in scores.items():
            gb.update_or_create_student(student)
            gb.add_submission(MODULE, student)
            for t in layouts[0].tests:
                gb.find_grade(t.grade_id, layouts[0].name, MODULE, student).auto_score = t.points * total / 6
            gb.db.commit()


def test_every_submission_gets_what_its_kernels_earn(graded):
    rows = {r.student: r for r in graded["out"]["rows"]}
    wrong = {s: (rows[s].score, exp, what) for s, (what, exp) in graded["expected"].items() if rows[s].score != exp}
    assert not wrong, f"clean scores differ from the honest work: {wrong}\n{graded['out']['text']}"
    assert all(r.max_score == 6 for r in rows.values()), "points must come from the released notebook"


def test_nothing_outside_the_sandbox_changed(graded):
    changed = [str(p) for p, d in graded["protected"].items() if not p.exists() or _digest(p) != d]
    assert not changed, f"files changed by students' code: {changed}"
    course = graded["course"]
    assert not (course / "grading" / "daemon-was-here").exists(), "a process outlived its check"
    if bwrap_path():
        cache = next(Path("/tmp").glob("fa-autograde-*"), None)
        assert not any(Path("/tmp").glob("fa-autograde-*/cache/launcher/poison")), "the kernel cache was written"
        assert cache is not None


def test_the_seed_never_reaches_a_notebook(graded):
    course, seed = graded["course"], str(graded["out"]["seed"])
    for nb in (course / "grading" / "autograded").rglob("*.ipynb"):
        text = nb.read_text()
        assert seed not in text
        assert str(derive_seed(int(seed), nb.parts[-3], "vector_add", "cases")) not in text


def test_nbgrader_feedback_and_export_work_unchanged(graded):
    assert graded["feedback"].returncode == 0, graded["feedback"].stderr[-2000:]
    assert graded["export"].returncode == 0, graded["export"].stderr[-2000:]
    course = graded["course"]
    rows = {r["student_id"]: r for r in read_csv(course / "grading" / "grades.csv")}
    for student, (what, exp) in graded["expected"].items():
        assert float(rows[student]["score"]) == exp, (student, what)
        assert float(rows[student]["max_score"]) == 6
        assert (course / "grading" / "feedback" / student / MODULE / "launching_kernels.html").exists()


def test_report_lists_in_notebook_differences_with_reasons(graded):
    report = graded["out"]["report"]
    rows = {r["student"]: r for r in report["rows"]}
    assert rows["patch_check"]["differs"] and rows["patch_check"]["in_notebook"] == 6
    assert "replaces the check() helper" in rows["patch_check"]["reasons"]
    assert rows["fake_rawkernel"]["differs"]
    assert not rows["ada"]["differs"]
    assert any("edited" in r for r in rows["edit_tests"]["reasons"])
    assert "hang" in rows["endless_kernel"]["outcomes"]["vector_add"]
    assert "hang" in rows["fork_bomb"]["outcomes"]["row_scale"]
    assert (graded["course"] / "grading" / "clean" / MODULE / "report.txt").exists()


def test_dask_gives_the_same_scores(tmp_path):
    pytest.importorskip("distributed", reason="Dask is optional: pip install dask distributed")
    from dask.distributed import LocalCluster

    course = tmp_path / "course"
    for d in (f"exercises/{MODULE}", f"notebooks/{MODULE}"):
        shutil.copytree(ROOT / d, course / d)
    shutil.copytree(ROOT / "grader", course / "grader", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (course / "grading").mkdir()
    corpus.build(course)
    keep = {"ada", "blank", "bug", "crash"}
    for d in (course / "grading" / "submitted").iterdir():
        if d.name not in keep:
            shutil.rmtree(d)
    lim = LIMITS
    local = autograde(MODULE, root=course, workers=2, seed=7, quiet=True, limits=lim, write_notebooks=False)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True) as cluster:
        remote = autograde(MODULE, root=course, scheduler=cluster.scheduler_address, seed=7, quiet=True,
                           limits=lim, write_notebooks=False)
    assert [(r.student, [c.score for c in r.cells]) for r in local["rows"]] == \
           [(r.student, [c.score for c in r.cells]) for r in remote["rows"]]


def test_several_modules_share_one_pool_and_score_as_alone(tmp_path):
    from grader.classroom import answer_cells, fill_answers, read_nb, write_nb

    other = "01_naive_attention"
    course = tmp_path / "course"
    for m in (MODULE, other):
        for d in (f"exercises/{m}", f"notebooks/{m}"):
            shutil.copytree(ROOT / d, course / d)
    shutil.copytree(ROOT / "grader", course / "grader", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (course / "grading").mkdir()
    corpus.build(course)
    for d in (course / "grading" / "submitted").iterdir():
        if d.name not in {"ada", "blank"}:
            shutil.rmtree(d)
    for rel in sorted((ROOT / "exercises" / other).glob("*.ipynb")):
        released = read_nb(rel)
        write_nb(fill_answers(released, answer_cells(read_nb(ROOT / "solutions" / other / rel.name))),
                 course / "grading" / "submitted" / "ada" / other / rel.name)
        write_nb(released, course / "grading" / "submitted" / "blank" / other / rel.name)

    def scores(out):
        return [(r.student, r.notebook, [c.score for c in r.cells]) for r in out["rows"]]

    together = autograde([MODULE, other], root=course, workers=2, seed=11, quiet=True, limits=LIMITS,
                         write_notebooks=False)
    assert set(together) == {MODULE, other}
    for m in (MODULE, other):
        assert "of several modules run together" in (course / "grading" / "clean" / m / "report.txt").read_text()
    for m in (MODULE, other):
        alone = autograde(m, root=course, workers=2, seed=11, quiet=True, limits=LIMITS, write_notebooks=False)
        assert scores(together[m]) == scores(alone)
        assert together[m]["checks"] == alone["checks"] > 0
    ada = {r.notebook: sum(c.score for c in r.cells) for r in together[other]["rows"] if r.student == "ada"}
    blank = {r.notebook: sum(c.score for c in r.cells) for r in together[other]["rows"] if r.student == "blank"}
    assert all(v > 0 for v in ada.values()) and all(v == 0 for v in blank.values())

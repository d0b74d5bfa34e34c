"""The clean regrade under faults, fast: a tiny class of module 00 graded by the real engine and
sandbox code, with a stand-in worker (a few lines of Python in place of the pristine grader's
``_worker``: it passes a kernel whose source holds the reference's arithmetic), so no emulator
runs. What is tested is what the run does around its checks: what it scores, writes and keeps
when a check does not run, when it is interrupted or killed, and when two runs meet.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("nbgrader")

import grader.autograde as ag  # noqa: E402
from grader.autograde import engine, sandbox  # noqa: E402
from grader.autograde.cli import NOT_GRADED_EXIT  # noqa: E402
from grader.autograde.cli import main as cli_main  # noqa: E402
from grader.autograde.sandbox import Limits, Runtime  # noqa: E402
from grader.classroom import answer_cells, fill_answers, read_nb, write_nb  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MODULE, NB = "00_launching_kernels", "launching_kernels"
LIMITS = Limits(wall_s=30)

# The stand-in worker: reads the job as the real one does, passes the reference's arithmetic;
# mode "sleep" makes every check hang (to be interrupted).
WORKER = '''
import json, os, sys, time
from pathlib import Path
def main():
    job = json.loads(sys.stdin.buffer.read().decode())
    mode = (Path(__file__).parents[2] / "mode").read_text().strip()
    if mode == "sleep":
        time.sleep(60)
    if mode == "forks":  # as the real worker: RLIMIT_NPROC first, then what a fork bomb does
        import resource
        n = job["limits"]["processes"]
        resource.setrlimit(resource.RLIMIT_NPROC, (n, n))
        forked = 0
        for _ in range(300):
            try:
                if os.fork() == 0:
                    time.sleep(5)
                    os._exit(0)
                forked += 1
            except OSError:
                break
        job["source"] = f"forked {forked}"
    ok = mode == "grade" and ("a[i] + b[i]" in job["source"] or "s[r] * x" in job["source"])
    case = {"name": "c", "hidden": False, "params": {}, "passed": ok, "fault": False,
            "message": job["source"] if mode == "forks" else "" if ok else "wrong"}
    result = {"status": "done", "backend": "cpu", "cases": [case], "visible_passed": ok, "all_passed": ok,
              "summary": "", "first_failure": None if ok else "wrong", "first_visible_failure": None if ok else "wrong"}
    with os.fdopen(int(job["result_fd"]), "wb") as f:
        f.write(json.dumps(result).encode())
    os._exit(0)
'''


def _stand_in(tmp: Path) -> Runtime:
    pkg = tmp / "pkg"
    (pkg / "grader" / "autograde").mkdir(parents=True)
    (pkg / "grader" / "__init__.py").write_text("")
    (pkg / "grader" / "autograde" / "__init__.py").write_text("")
    (pkg / "grader" / "autograde" / "_worker.py").write_text(WORKER)
    (tmp / "cache").mkdir()
    (tmp / "scratch").mkdir()
    return Runtime(pkg, tmp / "cache", tmp / "scratch", use_bwrap=False)


def _mode(rt: Runtime, mode: str) -> None:
    (rt.pkg_parent / "mode").write_text(mode)


@pytest.fixture(scope="module")
def empty_gradebook(tmp_path_factory):
    """nbgrader makes a gradebook by running alembic (seconds): made once, copied per test."""
    from nbgrader.api import Gradebook

    path = tmp_path_factory.mktemp("gradebook") / "gradebook.db"
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")
    with Gradebook("sqlite:///" + str(path)):
        pass
    return path


@pytest.fixture
def course(tmp_path, monkeypatch, empty_gradebook):
    """Three students (full marks, half, blank) and a stand-in runtime in place of the real one."""
    c = tmp_path / "course"
    (c / "grading").mkdir(parents=True)
    shutil.copy(empty_gradebook, c / "grading" / "gradebook.db")
    for d in (f"exercises/{MODULE}", f"notebooks/{MODULE}"):
        shutil.copytree(ROOT / d, c / d)
    released = read_nb(c / "exercises" / MODULE / f"{NB}.ipynb")
    solution = answer_cells(read_nb(ROOT / "solutions" / MODULE / f"{NB}.ipynb"))
    half = {k: v for k, v in solution.items() if k == "vector_add_kernel"}
    for student, answers in (("ada", solution), ("half", half), ("blank", {})):
        write_nb(fill_answers(released, answers), c / "grading" / "submitted" / student / MODULE / f"{NB}.ipynb")
    rt = _stand_in(tmp_path / "runtime")
    _mode(rt, "grade")
    monkeypatch.setattr(ag, "ensure_runtime", lambda *a, **k: rt)
    monkeypatch.setattr(ag, "bundle_from_dir", lambda path: b"stand-in grader")
    monkeypatch.setattr(ag, "_verify_grader", lambda root: None)
    yield c, rt
    sandbox.allow_new_sandboxes()


def _grade(c: Path, **kw):
    return ag.autograde(MODULE, root=c, workers=2, seed=5, quiet=True, limits=LIMITS, **kw)


def _gradebook(c: Path) -> dict:
    from nbgrader.api import Gradebook

    out = {}
    with Gradebook("sqlite:///" + str(c / "grading" / "gradebook.db")) as gb:
        for student in ("ada", "half", "blank"):
            try:
                sub = gb.find_submission_notebook(NB, MODULE, student)
            except Exception:  # noqa: BLE001  (not in the gradebook yet)
                continue
            out[student] = {g.name: g.auto_score for g in sub.grades}
    return out


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_check_that_did_not_run_keeps_the_old_score_and_a_resume_runs_only_it(course, monkeypatch):
    c, rt = course
    first = _grade(c)
    assert {r.student: r.score for r in first["rows"]} == {"ada": 6, "blank": 0, "half": 3}
    before = _gradebook(c)

    # Every row_scale check is lost (a Dask worker or the scheduler gone, a sandbox that did not
    # start), and ada's vector_add now fails, so the run has something new to write as well.
    real = engine.run_job
    ran = []

    def flaky(rt_, payload, limits):
        ran.append(payload["exercise"])
        if payload["exercise"] == "row_scale":
            raise OSError("scheduler connection closed")
        return real(rt_, payload, limits)

    monkeypatch.setattr(engine, "run_job", flaky)
    _mode(rt, "fail")
    second = _grade(c)
    after = _gradebook(c)
    assert second["not_graded"] == 6  # two row_scale cells (visible, hidden) per student
    for student, cells in after.items():
        for gid, score in cells.items():
            if "row_scale" in gid:
                assert score == before[student][gid], (student, gid)  # the old score, not a zero
            else:
                assert score == 0  # graded: it landed
    text = (c / "grading" / "clean" / MODULE / "report.txt").read_text()
    assert "NOT GRADED: 6 cell(s) of 3 notebook(s)" in text and "--resume" in text
    assert "OSError: scheduler connection closed" in text
    assert "worker died" not in text

    monkeypatch.setattr(engine, "run_job", flaky)
    ran.clear()
    with pytest.raises(SystemExit) as exit_:
        sys.exit(cli_main([MODULE, "--workers", "2", "--quiet", "--seed", "5", "--submissions", str(c / "grading/submitted"),
                           "--db", str(c / "grading" / "gradebook.db"), "--time-limit", "30"]))
    assert exit_.value.code == NOT_GRADED_EXIT

    monkeypatch.setattr(engine, "run_job", lambda *a: (ran.append(a[1]["exercise"]), real(*a))[1])
    ran.clear()
    third = _grade(c, resume=True)
    assert ran == ["row_scale"] * 3  # only what was missing: one check per student
    assert third["not_graded"] == 0
    assert {r.student: r.score for r in third["rows"]} == {"ada": 0, "blank": 0, "half": 0}


def test_ctrl_c_kills_the_sandboxes_at_once_and_writes_nothing(course):
    c, rt = course
    _grade(c)
    files = {p: _digest(p) for p in (c / "grading").rglob("*") if p.is_file() and "lock" not in p.name}
    _mode(rt, "sleep")
    seen = []

    def interrupt():
        deadline = time.monotonic() + 20
        while not sandbox._RUNNING and time.monotonic() < deadline:
            time.sleep(0.05)
        seen.extend(p.pid for p in list(sandbox._RUNNING))
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        _grade(c)
    took = time.monotonic() - t0
    assert seen and took < 10, f"{took:.1f} s to stop"
    for pid in seen:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
    now = {p: _digest(p) for p in (c / "grading").rglob("*") if p.is_file() and "lock" not in p.name}
    assert now == files, "an interrupted run wrote"


KILL_MID_WRITE = '''
import os, signal, sys
sys.path[:0] = [{tests!r}]
import test_faults as t
import grader.autograde as ag
from nbgrader.api import Gradebook
rt = t._stand_in(__import__("pathlib").Path({tmp!r}))
t._mode(rt, "fail")
ag.ensure_runtime = lambda *a, **k: rt
ag.bundle_from_dir = lambda path: b"stand-in grader"
ag._verify_grader = lambda root: None
real, calls = Gradebook.find_grade, []
def find_grade(self, *a):
    calls.append(a)
    if len(calls) == 5:  # a student and a half written
        self.db.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    return real(self, *a)
Gradebook.find_grade = find_grade
ag.autograde({module!r}, root={course!r}, workers=2, seed=5, quiet=True, limits=t.LIMITS)
'''


def test_a_run_killed_while_it_writes_leaves_the_previous_grades_whole(course, tmp_path):
    c, rt = course
    _grade(c)
    before = _gradebook(c)
    report = _digest(c / "grading" / "clean" / MODULE / "report.txt")
    script = KILL_MID_WRITE.format(tests=str(Path(__file__).parent), tmp=str(tmp_path / "rt2"), module=MODULE,
                                   course=str(c))
    env = dict(os.environ, PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    assert _gradebook(c) == before
    assert _digest(c / "grading" / "clean" / MODULE / "report.txt") == report


def test_a_second_run_on_the_same_gradebook_refuses_at_once(course):
    c, rt = course
    lock = c / "grading" / "gradebook.db.autograde-lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        f.write("pid 4242, started earlier\n")
        f.flush()
        t0 = time.monotonic()
        with pytest.raises(SystemExit, match="another clean autograde is writing this gradebook.*pid 4242"):
            _grade(c)
        assert time.monotonic() - t0 < 5
    assert not (c / "grading" / "clean").exists()
    assert _grade(c)["not_graded"] == 0  # the lock released, a run goes ahead


@pytest.mark.parametrize("workers", ["0", "-1"])
def test_workers_below_one_are_refused(workers, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli_main([MODULE, "--workers", workers])
    assert exit_.value.code == 2
    assert "must be 1 or more" in capsys.readouterr().err




def test_links_out_of_a_submission_and_broken_notebooks_cost_that_notebook_only(course):
    c, rt = course
    sub = c / "grading" / "submitted"
    (sub / "mallory").mkdir()
    (sub / "mallory" / MODULE).symlink_to(c / "notebooks" / MODULE)  # the instructor's solutions
    (sub / "eve" / MODULE).mkdir(parents=True)
    (sub / "eve" / MODULE / f"{NB}.ipynb").symlink_to(ROOT / "solutions" / MODULE / f"{NB}.ipynb")
    listed = read_nb(sub / "ada" / MODULE / f"{NB}.ipynb")
    for cell in listed["cells"]:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "vector_add_kernel":
            cell["metadata"]["nbgrader"]["grade_id"] = ["vector_add_kernel"]
    write_nb(listed, sub / "lister" / MODULE / f"{NB}.ipynb")
    (sub / "deep" / MODULE).mkdir(parents=True)
    (sub / "deep" / MODULE / f"{NB}.ipynb").write_text("[" * 100_000 + "]" * 100_000)
    (sub / "nomodule").mkdir()
    out = _grade(c)
    rows = {r.student: r for r in out["rows"]}
    assert rows["ada"].score == 6 and rows["half"].score == 3
    assert rows["mallory"].score == 0 and "symbolic link" in rows["mallory"].reasons[0]
    assert rows["eve"].score == 0 and "symbolic link" in rows["eve"].reasons[0]
    # its vector_add cell has no usable grade_id: found by its %%cuda line instead, and said so
    assert rows["lister"].score == 6 and "found by its '%%cuda vector_add' line" in rows["lister"].reasons[0]
    assert rows["deep"].score == 0 and "RecursionError" in rows["deep"].reasons[0]
    assert f"nomodule: no {MODULE}/ folder" in out["text"]


def test_a_runtime_folder_is_new_and_private_to_each_run(course, monkeypatch, tmp_path):
    c, rt = course
    bases = []
    monkeypatch.setattr(ag, "ensure_runtime", lambda bundle, limits, base: bases.append(base) or rt)
    _grade(c)
    _grade(c)
    assert len(set(bases)) == 2 and all(b.name.startswith("fa-autograde-") for b in bases)
    assert all(not b.exists() or (b.stat().st_mode & 0o777) == 0o700 for b in bases)
    prepared = tmp_path / "prepared"
    prepared.mkdir(mode=0o755)
    prepared.chmod(0o755)
    with pytest.raises(RuntimeError, match="not this user's private folder"):
        ag.runtime.ensure_runtime(ag.Bundle(b"", "d", "r"), LIMITS, prepared)


def test_a_grader_changed_by_student_code_is_refused(tmp_path):
    course = tmp_path / "course"
    shutil.copytree(ROOT / "grader", course / "grader", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    ag._verify_grader(course)  # a faithful copy
    with open(course / "grader" / "autograde" / "__init__.py", "a") as f:
        f.write("\n_score = lambda plan, by_key: []\n")
    (course / "grader" / "planted.py").write_text("")
    with pytest.raises(SystemExit, match=r"grader/autograde/__init__.py .*grader/planted.py"):
        ag._verify_grader(course)


def test_a_process_left_in_grading_stops_the_run_before_it_starts(course):
    c, rt = course
    where = c / "grading" / "autograded" / "ada" / MODULE
    where.mkdir(parents=True)
    daemon = subprocess.Popen(["sleep", "60"], cwd=where)
    try:
        with pytest.raises(SystemExit, match=f"pid {daemon.pid} in {where}"):
            _grade(c)
    finally:
        daemon.kill()
        daemon.wait()
    assert not (c / "grading" / "clean").exists()


def test_extra_credit_on_a_clean_graded_cell_is_reported(course):
    from nbgrader.api import Gradebook

    c, rt = course
    _grade(c)
    with Gradebook("sqlite:///" + str(c / "grading" / "gradebook.db")) as gb:
        gb.find_grade("vector_add_hidden", NB, MODULE, "blank").extra_credit = 6
        gb.db.commit()
    rows = {r.student: r for r in _grade(c)["rows"]}
    assert any("vector_add_hidden has extra credit (6)" in why for why in rows["blank"].reasons)


def test_the_process_limit_holds_for_root_too(tmp_path):
    if os.geteuid() == 0 and sandbox.pids_cgroup() is None:
        pytest.skip("root without a writable pids cgroup: the process limit cannot hold (the report says so)")
    rt = _stand_in(tmp_path)
    _mode(rt, "forks")
    out = sandbox.run_job(rt, {"kind": "check", "source": ""}, Limits(wall_s=30, processes=40))
    forked = int(out.result["cases"][0]["message"].split()[1])
    assert forked < 40, f"{forked} processes started against a limit of 40"
    assert forked > 10


HOST_CPP = '''#include <vector>
#include <algorithm>
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        std::vector<float> v{a[i], b[i]};
        std::transform(v.begin(), v.begin() + 1, v.begin() + 1, c + i, [](float p, float q) { return p + q; });
    }
}
'''  # g++ builds it and the emulator runs it right on every case: only NVRTC says it is not CUDA


def test_host_cpp_that_the_emulator_accepts_is_refused_by_nvrtc():
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc", reason="needs the nvrtc extra: pip install -e '.[nvrtc]'")
    from grader.autograde._worker import nvrtc_refusal
    from grader.checks import get_exercise

    ex = get_exercise("vector_add")
    why = nvrtc_refusal(ex, HOST_CPP, ())
    assert why and "does not compile with NVRTC" in why and "std::vector" in why
    solution = answer_cells(read_nb(ROOT / "solutions" / MODULE / f"{NB}.ipynb"))["vector_add_kernel"]
    assert nvrtc_refusal(ex, solution.split("\n", 1)[1], ()) is None


def test_a_stock_autograde_after_the_clean_one_keeps_the_clean_scores(course):
    c, rt = course
    released = read_nb(c / "exercises" / MODULE / f"{NB}.ipynb")
    fake = {"cell_type": "code", "execution_count": None, "id": "cheat", "metadata": {}, "outputs": [],
            "source": "import grader, grader.checks\ndef check(*a, **k):\n    print('[PASS] all cases')\n"
                      "grader.check = grader.checks.check = check\n"}
    setup = next(i for i, cell in enumerate(released["cells"])
                 if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "setup")
    released["cells"].insert(setup + 1, fake)
    write_nb(released, c / "grading" / "submitted" / "cheat" / MODULE / f"{NB}.ipynb")
    shutil.copy(ROOT / "nbgrader_config.py", c)
    env = dict(os.environ, PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    env.pop("GRADER_SEED", None)
    subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", MODULE, "--force"], cwd=c, env=env,
                   check=True, capture_output=True, timeout=600)  # the released cells, as stock autograde needs
    clean = {r.student: r.score for r in _grade(c)["rows"]}
    assert clean["cheat"] == 0
    stock = subprocess.run([sys.executable, "-m", "nbgrader", "autograde", MODULE, "--student", "cheat", "--force"],
                           cwd=c, env=env, capture_output=True, text=True, timeout=600)
    log = stock.stdout + stock.stderr
    assert "the clean regrade's 0.0 is kept" in log, log[-3000:]
    from nbgrader.api import Gradebook

    with Gradebook("sqlite:///" + str(c / "grading" / "gradebook.db")) as gb:
        grades = {g.name: g.auto_score for g in gb.find_submission_notebook(NB, MODULE, "cheat").grades}
    assert grades == dict.fromkeys(grades, 0.0) and len(grades) == 4


def test_an_answer_cell_without_its_metadata_is_found_by_its_magic_line(course):
    c, rt = course
    nb = read_nb(c / "grading" / "submitted" / "ada" / MODULE / f"{NB}.ipynb")
    for cell in nb["cells"]:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "vector_add_kernel":
            cell["metadata"] = {}
    write_nb(nb, c / "grading" / "submitted" / "ada" / MODULE / f"{NB}.ipynb")
    ada = next(r for r in _grade(c)["rows"] if r.student == "ada")
    assert ada.score == 6
    assert "answer cell vector_add_kernel found by its '%%cuda vector_add' line" in ada.reasons[0]


def test_a_checked_kernel_is_numbered_as_the_editor_numbers_its_cell(course):
    c, rt = course
    plan = ag._plan(c, MODULE, c / "grading" / "submitted", None, 5, "cpu", True)
    cell = answer_cells(read_nb(ROOT / "solutions" / MODULE / f"{NB}.ipynb"))["vector_add_kernel"]
    job = next(j for j in plan.jobs if j.key == ("ada", NB, "vector_add"))
    editor = cell.splitlines()  # line 1 is the %%cuda line
    assert job.payload["source"].splitlines()[1:] == editor[1:]
    assert job.payload["source"].splitlines()[0] == ""


def test_feedback_pages_carry_the_notebooks_figures():
    from grader.feedback_mathjax import embed_course_images

    page = ('<p><img alt="pipeline" src="../../modules/01_naive_attention/img/pipeline.png"/></p>'
            '<img src="../../modules/../grading/gradebook.db"/><img src="https://example.org/x.png"/>')
    out = embed_course_images(page, ROOT)
    png = (ROOT / "modules" / "01_naive_attention" / "img" / "pipeline.png").read_bytes()
    import base64

    assert f'src="data:image/png;base64,{base64.b64encode(png).decode()}"' in out
    assert '<img src="../../modules/../grading/gradebook.db"/>' in out  # outside modules/: left alone
    assert '<img src="https://example.org/x.png"/>' in out


def test_a_dask_scheduler_lost_mid_run_grades_nothing_and_invents_no_zero(course, monkeypatch):
    pytest.importorskip("distributed", reason="Dask is optional: pip install dask distributed")
    from dask.distributed import LocalCluster

    c, rt = course
    _grade(c)
    before = _gradebook(c)
    monkeypatch.setattr(engine, "ensure_runtime", lambda *a, **k: rt)  # the in-process workers' runtime
    _mode(rt, "sleep")
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cluster:
        def lose_the_scheduler():
            deadline = time.monotonic() + 60
            while not sandbox._RUNNING and time.monotonic() < deadline:
                time.sleep(0.05)
            cluster.sync(cluster.scheduler.close)

        threading.Thread(target=lose_the_scheduler, daemon=True).start()
        t0 = time.monotonic()
        out = ag.autograde(MODULE, root=c, scheduler=cluster.scheduler_address, seed=5, quiet=True, limits=LIMITS)
        took = time.monotonic() - t0
        sandbox.kill_running()  # the in-process workers' stand-in sandboxes
    assert out["not_graded"] == 12 and took < 25, (out["not_graded"], took)
    assert _gradebook(c) == before
    assert "FutureCancelledError" in out["text"] and "NOT GRADED: 12 cell(s) of 3 notebook(s)" in out["text"]


def test_an_unreachable_scheduler_is_one_line_and_soon(course):
    pytest.importorskip("distributed", reason="Dask is optional: pip install dask distributed")
    c, rt = course
    t0 = time.monotonic()
    with pytest.raises(SystemExit, match=r"^cannot reach the Dask scheduler tcp://127\.0\.0\.1:9 within 10 s") as exit_:
        ag.autograde(MODULE, root=c, scheduler="tcp://127.0.0.1:9", seed=5, quiet=True, limits=LIMITS)
    assert time.monotonic() - t0 < 30 and "\n" not in str(exit_.value)

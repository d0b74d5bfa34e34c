"""``python -m grader autograde MODULE``: the authoritative grade, from a clean process.

nbgrader runs a student's notebook with the instructor's permissions: answer cells can replace
``check()``, fake the kernel runner, paste the reference, read the seed, or damage the course
and the gradebook. This command grades **instead of** ``nbgrader autograde``; run after it, it
overwrites its scores and lists the differences, but cannot undo what its notebooks' code did
(it refuses a changed ``grader/`` and processes left running in ``grading/``):

1. For every ``grading/submitted/STUDENT/MODULE/NOTEBOOK.ipynb`` it takes, by ``grade_id`` of
   the *released* notebook in ``exercises/``, only the source of each ``%%cuda`` answer cell
   (:mod:`.notebook`). Submitted metadata, points and test cells are never read for grading.
2. Each (student, exercise) is one job: the kernel's source is checked on every visible and
   hidden case in a fresh worker process that imports a pristine, read-only copy of ``grader``
   made for this run (:mod:`.runtime`), inside bubblewrap with no network, the course absent,
   a private ``/tmp``, ``HOME`` and kernel cache, rlimits, a wall clock and capped output
   (:mod:`.sandbox`). The hidden cases' seed and their *shapes* (:mod:`.shapes`) come from
   ``derive_seed(run seed, student, exercise)``, sent on the worker's stdin.
3. Jobs run ``--workers`` at a time on this machine, or on a Dask cluster (``--scheduler``);
   a job whose worker dies is retried once (:mod:`.engine`). Results do not depend on either.
   A check that did not run (sandbox not started, Dask worker or scheduler lost) is NOT GRADED,
   never a score; ``--resume`` runs only those.
4. Scores go into the nbgrader gradebook (same ``grade_id``\\ s and points) in one transaction, a clean
   autograded notebook is written for ``nbgrader generate_feedback``, and a report
   (``grading/clean/MODULE/report.txt`` and ``.json``) lists every submission whose
   in-notebook score differs from the clean one, with the reasons found.

Hidden-case shapes: the exercises declare fixed shapes and, in ``hidden_sizes``, which sizes may
vary and the unit (tile or block) each is cut into; :mod:`.shapes` redraws those per student,
keeping each value's class in its unit, and leaves every other parameter as declared.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import fcntl
import hashlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..course import ROOT
from ..source import cell_code
from .engine import Job, JobResult, Progress, derive_seed, run_dask, run_local
from .notebook import MAGIC as MAGIC_CUDA
from .notebook import load_layout, split_magic, submitted_answers, suspicious
from .runtime import Bundle, bundle_from_dir, bundle_from_git, bundle_hash, ensure_runtime, remove_runtime
from .sandbox import Limits, Outcome, bwrap_path, process_limit_note

MARK = "grader_autograde"  # notebook metadata key of the notebooks this command writes


@dataclass
class Submission:
    student: str
    notebook: str
    path: Path | None
    sha256: str | None
    nb: dict | None
    problem: str | None = None


@dataclass
class CellScore:
    grade_id: str
    points: float
    score: float | None  # None: a check of this cell did not run (not graded; its old score is kept)
    before: float | None = None
    why: str = ""


@dataclass
class Row:
    student: str
    notebook: str
    cells: list = field(default_factory=list)
    reasons: list = field(default_factory=list)
    outcomes: dict = field(default_factory=dict)  # exercise -> short status
    ours_before: bool = False  # its autograded notebook was written by this command

    @property
    def score(self) -> float:
        return sum(c.score for c in self.cells if c.score is not None)

    @property
    def not_graded(self) -> list[str]:
        return [c.grade_id for c in self.cells if c.score is None]

    @property
    def max_score(self) -> float:
        return sum(c.points for c in self.cells)

    @property
    def before(self) -> float | None:
        if any(c.before is None for c in self.cells):
            return None
        return sum(c.before for c in self.cells)


def _read_submissions(root: Path, submitted: Path, module: str, layouts, students=None,
                      notes: list | None = None) -> list[Submission]:
    subs = []
    if not submitted.is_dir():
        return subs
    for sdir in sorted(p for p in submitted.iterdir() if p.is_dir()):
        if students and sdir.name not in students:
            continue
        mdir = sdir / module
        if not mdir.is_dir():
            if notes is not None:
                notes.append(f"{sdir.name}: no {module}/ folder in {submitted.name}/{sdir.name}/ (nothing graded)")
            continue
        for lay in layouts:
            path = mdir / f"{lay.name}.ipynb"
            left = _leaves(path, submitted / sdir.name)
            if left:
                subs.append(Submission(sdir.name, lay.name, None, None, None, left))
                continue
            if not path.is_file():
                subs.append(Submission(sdir.name, lay.name, None, None, None, "notebook not handed in"))
                continue
            data = path.read_bytes()
            try:
                nb = json.loads(data.decode())
                if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
                    raise ValueError("no cells")
                submitted_answers(nb, lay)
                suspicious(nb, lay)
                problem = None
            except (ValueError, UnicodeDecodeError, RecursionError, TypeError, AttributeError) as err:
                nb, problem = None, f"notebook unreadable ({type(err).__name__}: {str(err)[:200]})"
            subs.append(Submission(sdir.name, lay.name, path, hashlib.sha256(data).hexdigest(), nb, problem))
    return subs


def _leaves(path: Path, student_dir: Path) -> str | None:
    """Why a submitted notebook is refused as a link out of its student's folder, or None. A link
    to notebooks/ or solutions/ would grade the instructor's files as the student's work."""
    for p in (student_dir, path.parent, path):
        if p.is_symlink():
            return f"refused: {p.name} is a symbolic link (to {os.readlink(p)}), not a handed-in file"
    if path.exists() and not path.resolve().is_relative_to(student_dir.resolve()):
        return f"refused: {path.name} resolves outside the student's folder ({path.resolve()})"
    return None


def _db_url(root: Path, db: str | None) -> str:
    if db:
        return db if "://" in db else "sqlite:///" + str(Path(db).resolve())
    return "sqlite:///" + str((root / "grading" / "gradebook.db").resolve())


@contextlib.contextmanager
def gradebook_lock(root: Path, url: str):
    """Hold the gradebook's lock file for a whole run: a second run on the same gradebook refuses
    at once, naming the first (flock: released by the kernel however the holder ends)."""
    path = Path(url[len("sqlite:///"):] + ".autograde-lock") if url.startswith("sqlite:///") else \
        root / "grading" / ".autograde-lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "another process"
            raise SystemExit(f"another clean autograde is writing this gradebook ({holder}; lock {path}): "
                             "wait for it to end, then run again") from None
        f.seek(0)
        f.truncate()
        f.write(f"pid {os.getpid()}, started {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        f.flush()
        try:
            yield
        finally:
            f.truncate(0)


def _check_unchanged(plans) -> None:
    """Every submission still holds the bytes graded: one changed during the run (by a process
    left behind, say) stops the run before anything is written."""
    changed = [str(s.path) for plan in plans for s in plan.subs
               if s.path is not None and hashlib.sha256(s.path.read_bytes()).hexdigest() != s.sha256]
    if changed:
        raise SystemExit("submissions changed while they were graded (by a process still running? the next run "
                         "lists those running from grading/): " + ", ".join(changed[:10]) + "; nothing written")


def _ensure_assignment(gb, module: str, layouts) -> list[str]:
    """The module, its notebooks and graded cells in the gradebook (as generate_assignment
    records them). Returns notes about points that differ from the released notebook."""
    from nbgrader.api import MissingEntry

    notes = []
    try:
        gb.find_assignment(module)
    except MissingEntry:
        gb.update_or_create_assignment(module)
    for lay in layouts:
        gb.update_or_create_notebook(lay.name, module)
        for t in lay.tests:
            try:
                gc = gb.find_grade_cell(t.grade_id, lay.name, module)
                if float(gc.max_score) != t.points:
                    notes.append(f"{lay.name}/{t.grade_id}: the gradebook says {gc.max_score:g} points, the released "
                                 f"notebook {t.points:g}; the released value is used")
                    gc.max_score = t.points
                    gb.db.commit()
            except MissingEntry:
                gb.update_or_create_grade_cell(t.grade_id, lay.name, module, max_score=t.points, cell_type="code")
        for gid in lay.answers:
            gb.update_or_create_solution_cell(gid, lay.name, module)
    return notes


def _clean_notebook(lay, answers: dict, cell_results: dict, info: dict) -> dict:
    """The released notebook with the student's answer cells and the clean checks' results as
    the test cells' outputs: what ``generate_feedback`` turns into the student's page."""
    nb = copy.deepcopy(lay.released)
    nb.setdefault("metadata", {})[MARK] = info
    for cell in nb["cells"]:
        if cell.get("cell_type") != "code":
            continue
        cell["outputs"], cell["execution_count"] = [], None
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if gid in answers and answers[gid] is not None:
            cell["source"] = answers[gid]
        if gid in cell_results:
            text, error = cell_results[gid]
            if text:
                cell["outputs"].append({"output_type": "stream", "name": "stdout", "text": text + "\n"})
            if error:
                cell["outputs"].append({"output_type": "error", "ename": "CheckFailed", "evalue": error,
                                        "traceback": [f"\x1b[0;31mCheckFailed\x1b[0m: {error}"]})
    return nb


def _short(outcome, result) -> str:
    if outcome.status == "lost":
        return "NOT GRADED (the check did not run: " + outcome.output.splitlines()[0][:160] + ")" \
            if outcome.output else "NOT GRADED (the check did not run)"
    if outcome.status == "timeout":
        return "hang: killed at its time limit (the CPU seconds of its processes, or the wall-clock cap)"
    if outcome.status == "died":
        return f"worker died twice (exit {outcome.returncode})"
    if outcome.status == "error":
        return "grader error: " + (result or {}).get("error", "?")
    cases = (result or {}).get("cases", [])
    faults = [c for c in cases if c["fault"]]
    if faults:
        msg = faults[0]["message"].splitlines()[0]
        if "time limit" in msg or "Timeout" in msg:
            return "hang: " + msg[:160]
        return "fault: " + msg[:160]
    n = sum(c["passed"] for c in cases)
    return f"{n}/{len(cases)} cases passed"


def autograde(module: str | list[str], *, root: Path | str = ROOT, submissions: str | Path = "grading/submitted",
              workers: int | None = None, scheduler: str | None = None, seed: int | None = None,
              limits: Limits | None = None, backend: str = "cpu", draw_shapes: bool = True,
              grader_ref: str | None = None, db: str | None = None, students: list | None = None,
              out_dir: str | Path | None = None, write_notebooks: bool = True, resume: bool = False,
              quiet: bool = False, progress_stream=None) -> dict:
    """Grade one module (returns its result) or several (a list: returns {module: result}). The
    checks of several modules share one pool, so no worker waits for a module's last check while
    another module's are queued.

    A check that did not run (its sandbox could not start, a Dask worker or the scheduler was
    lost) is never scored: its cells keep their old gradebook score, the report says NOT GRADED,
    and the result's ``not_graded`` counts them; ``resume=True`` then reuses the last run's seed
    and its finished checks and runs only the rest. Nothing is written before every check is
    back; the gradebook's writes are one transaction, then the files are replaced whole."""
    t0 = time.monotonic()
    root = Path(root).resolve()
    limits = limits or Limits()
    if workers is not None and workers < 1:
        raise SystemExit(f"--workers must be 1 or more (got {workers})")
    say = (lambda *a: None) if quiet else (lambda *a: print(*a, flush=True))
    modules = [module] if isinstance(module, str) else list(module)
    if out_dir is not None and len(modules) > 1:
        raise SystemExit("out_dir names one module's report folder: grade one module with it")
    submitted = Path(submissions)
    submitted = submitted if submitted.is_absolute() else root / submitted
    out_dirs = {m: Path(out_dir) if out_dir else root / "grading" / "clean" / m for m in modules}
    url = _db_url(root, db)
    with gradebook_lock(root, url):
        if resume:
            seed = _resume_seed(out_dirs, seed)
        if seed is None:
            env = os.environ.get("GRADER_SEED")
            seed = int(env) if env else secrets.randbits(62)
        return _run(modules, module, root, submitted, out_dirs, url, workers, scheduler, seed, limits, backend,
                    draw_shapes, grader_ref, students, write_notebooks, resume, say, quiet, progress_stream, t0)


def _run(modules, module, root, submitted, out_dirs, url, workers, scheduler, seed, limits, backend, draw_shapes,
         grader_ref, students, write_notebooks, resume, say, quiet, progress_stream, t0) -> dict:
    sandbox = bwrap_path() is not None
    shared_notes = [] if sandbox else [
        "bwrap (bubblewrap) is not installed, or cannot make a sandbox on this machine (unprivileged user "
        "namespaces off): each check ran in its own process and session with rlimits, but WITHOUT "
        "file-system, network or PID isolation (apt-get install bubblewrap; `python -m grader doctor` says which)."]
    shared_notes += [n for n in (process_limit_note(), _nvrtc_note()) if n]
    plans = [_plan(root, m, submitted, students, seed, backend, draw_shapes) for m in modules]

    # ------------------------------------------------------------------ the pristine grader
    _no_leftover_processes(root)
    if grader_ref:
        data = bundle_from_git(root, grader_ref)
    else:
        _verify_grader(root)
        data = bundle_from_dir(root / "grader")
    digest = bundle_hash(data)
    bundle = Bundle(data, digest, secrets.token_hex(16))
    n_workers = workers or os.cpu_count() or 1
    jobs = [Job((plan.module,) + job.key, job.payload) for plan in plans for job in plan.jobs]
    done_before = _finished_checks(out_dirs, digest, limits) if resume else {}
    todo = [j for j in jobs if _job_digest(j) not in done_before]
    progress = Progress(len(todo), n_workers if not scheduler else 0, progress_stream, every_s=0 if quiet else 5.0)
    if quiet and progress_stream is None:
        progress = None
    for plan in plans:
        say(f"autograde {plan.module}: {len(plan.subs)} notebook(s), {len(plan.jobs)} check(s), "
            + (f"Dask scheduler {scheduler}" if scheduler else f"{n_workers} worker(s)")
            + ("" if sandbox else " (NO SANDBOX: bwrap missing)"))
    if resume:
        say(f"resuming: {len(jobs) - len(todo)} check(s) done by the last run are kept, {len(todo)} to run")
    t_jobs = time.monotonic()
    if not todo:
        results = []
    elif scheduler:
        results = run_dask(scheduler, bundle, todo, limits, progress)
    else:
        base = Path(tempfile.mkdtemp(prefix="fa-autograde-"))
        try:
            rt = ensure_runtime(bundle, limits, base)
            t_jobs = time.monotonic()
            results = run_local(rt, todo, limits, n_workers, progress)
        finally:
            remove_runtime(base)
    results += [JobResult(j.key, done_before[_job_digest(j)], 1) for j in jobs if _job_digest(j) in done_before]
    seconds_checks = time.monotonic() - t_jobs
    job_seconds = sum(r.outcome.seconds for r in results)  # the workers' busy time, to tell idling from slowing
    by_key = {r.key: r for r in results}
    digests = {j.key: _job_digest(j) for j in jobs}
    missing = next((n for r in results if str(n := (r.outcome.result or {}).get("nvrtc", "ok")) != "ok"), None)
    if missing and not any(n.startswith("NVRTC") for n in shared_notes):
        shared_notes.append(f"NVRTC {missing} in the sandbox: kernels were NOT also compiled with the GPU's "
                            "compiler, so host C++ that g++ accepts (std::vector, <algorithm>) can pass on the emulator")

    info = {"seed_digest": hashlib.sha256(str(seed).encode()).hexdigest()[:12], "grader": digest,
            "sandbox": "bwrap" if sandbox else "none", "backend": backend}
    mine = {plan.module: {key[1:]: r for key, r in by_key.items() if key[0] == plan.module} for plan in plans}
    rows = {plan.module: _score(plan, mine[plan.module]) for plan in plans}
    _check_unchanged(plans)

    # ------------------------------------------------------------------ gradebook: one transaction
    from nbgrader.api import Gradebook

    # nbgrader's Gradebook runs `alembic` as a subprocess: this interpreter's bin/ first on PATH
    bindir = str(Path(sys.executable).parent)
    if not os.environ.get("PATH", "").startswith(bindir + os.pathsep):
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    import warnings

    notes = {}
    with _signals_held(), Gradebook(url) as gb, warnings.catch_warnings():
        # nbgrader's add_submission trips SQLAlchemy autoflush warnings; harmless
        warnings.simplefilter("ignore")
        with _one_transaction(gb):
            for plan in plans:
                notes[plan.module] = _record(gb, plan, rows[plan.module], root)

    # ------------------------------------------------------------------ files, each replaced whole
    outs = {}
    with _signals_held():
        for plan in plans:
            outs[plan.module] = _write_files(plan, rows[plan.module], mine[plan.module], root, out_dirs[plan.module],
                                             info, write_notebooks, shared_notes + plan.notes + notes[plan.module],
                                             seed, seconds_checks, n_workers, scheduler, len(jobs), digest, limits,
                                             digests, say)
    for out in outs.values():
        out["seconds"] = time.monotonic() - t0
        out["pool_job_seconds"] = job_seconds
    return outs[modules[0]] if isinstance(module, str) else outs


def _write_files(plan, rows, mine, root, od, info, write_notebooks, all_notes, seed, seconds_checks, n_workers,
                 scheduler, pool_jobs, digest, limits, digests, say) -> dict:
    if write_notebooks:
        _write_notebooks(plan, rows, mine, root, od, info)
    report = _report(plan.module, rows, plan.subs, all_notes, seed, info, seconds_checks,
                     len(plan.jobs), n_workers, scheduler, pool_jobs)
    _write_atomic(od / "checks.json", json.dumps(
        {"grader": digest, "limits": dataclasses.asdict(limits), "seed": seed,
         "checks": {digests[(plan.module,) + k]: dataclasses.asdict(r.outcome)
                    for k, r in mine.items() if r.outcome.status != "lost"}}) + "\n")
    _write_atomic(od / "report.json", json.dumps(report["json"], indent=1) + "\n")
    _write_atomic(od / "report.txt", report["text"] + "\n")
    say(report["text"])
    say(f"report: {od / 'report.txt'}  (seed and details: report.json, instructor only)")
    return {"rows": rows, "report": report["json"], "text": report["text"], "seconds_checks": seconds_checks,
            "checks": len(plan.jobs), "out_dir": od, "seed": seed, "not_graded": sum(len(r.not_graded) for r in rows)}


@contextlib.contextmanager
def _signals_held():
    """Ctrl-C and SIGTERM wait while the run writes (delivered after), so no write is cut short."""
    main = threading.current_thread() is threading.main_thread()
    if main:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        if main:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


def _job_digest(job: Job) -> str:
    """What a check's outcome depends on besides the grader and the limits: its key and payload."""
    return hashlib.sha256(json.dumps([list(job.key), job.payload], sort_keys=True).encode()).hexdigest()


def _resume_seed(out_dirs: dict, seed: int | None) -> int:
    seeds = set()
    for od in out_dirs.values():
        try:
            seeds.add(json.loads((od / "checks.json").read_text())["seed"])
        except (OSError, ValueError, KeyError):
            raise SystemExit(f"--resume: no earlier run to resume in {od} (checks.json missing)") from None
    if len(seeds) != 1 or (seed is not None and seed not in seeds):
        raise SystemExit(f"--resume: the earlier runs used other seeds ({sorted(seeds)}); resume them one by one")
    return seeds.pop()


def _finished_checks(out_dirs: dict, digest: str, limits: Limits) -> dict:
    """{job digest: Outcome} of the checks the last run finished with this grader and these limits."""
    done = {}
    for od in out_dirs.values():
        state = json.loads((od / "checks.json").read_text())
        if state.get("grader") != digest or state.get("limits") != dataclasses.asdict(limits):
            continue
        done.update({k: Outcome(**v) for k, v in state["checks"].items()})
    return done


@dataclass
class _Plan:
    """One module's submissions and the checks they need."""
    module: str
    layouts: list
    subs: list
    jobs: list
    answers_of: dict
    notes: list
    repairs: dict  # (student, notebook) -> answer cells found by their magic line

    @property
    def by_name(self) -> dict:
        return {lay.name: lay for lay in self.layouts}


def _plan(root: Path, module: str, submitted: Path, students, seed: int, backend: str, draw_shapes: bool) -> _Plan:
    layouts = load_layout(root, module)
    if not layouts:
        raise SystemExit(f"no released notebook in {root / 'exercises' / module}")
    notes = [f"{lay.name}: {p}" for lay in layouts for p in lay.problems]
    subs = _read_submissions(root, submitted, module, layouts, students, notes)
    by_name = {lay.name: lay for lay in layouts}
    jobs, answers_of, repairs = [], {}, {}
    for s in subs:
        if s.nb is None:
            continue
        lay = by_name[s.notebook]
        answers = submitted_answers(s.nb, lay, repairs.setdefault((s.student, s.notebook), []))
        answers_of[(s.student, s.notebook)] = answers
        for ex in lay.exercises:
            kernel = next(t.kernel_var for t in lay.tests if t.exercise == ex)
            cell = lay.answer_for(kernel)
            src = answers.get(cell.grade_id) if cell else None
            name, options, body = split_magic(src) if src is not None else (None, (), "")
            if src is None or name is None:
                continue
            # a %%cuda kernel numbered as the editor shows the cell (as the magic does); Triton as is
            source = cell_code(body) if src.lstrip().split(None, 1)[0] == MAGIC_CUDA else body
            payload = {"kind": "check", "exercise": ex, "source": source, "options": list(options),
                       "seed": derive_seed(seed, s.student, ex, "cases"),
                       "shape_seed": derive_seed(seed, s.student, ex, "shapes"),
                       "backend": backend, "draw_shapes": draw_shapes}
            jobs.append(Job((s.student, s.notebook, ex), payload))
    return _Plan(module, layouts, subs, jobs, answers_of, notes, repairs)


def _score(plan: _Plan, by_key: dict) -> list[Row]:
    """One module's rows: every submitted notebook's cells scored from its checks' outcomes."""
    rows = []
    for s in plan.subs:
        lay = plan.by_name[s.notebook]
        row = Row(s.student, s.notebook)
        rows.append(row)
        if s.nb is None:
            row.reasons.append(s.problem)
        else:
            row.reasons += plan.repairs.get((s.student, s.notebook), []) + suspicious(s.nb, lay)
        answers = plan.answers_of.get((s.student, s.notebook), {})
        for t in lay.tests:
            jr = by_key.get((s.student, s.notebook, t.exercise))
            cell = lay.answer_for(t.kernel_var)
            if jr is None:
                src = answers.get(cell.grade_id) if cell else None
                why = ("notebook not graded" if s.nb is None else
                       "answer cell missing or duplicated" if src is None else "answer cell is not a %%cuda cell")
                row.cells.append(CellScore(t.grade_id, t.points, 0.0, why=why))
                row.outcomes[t.exercise] = why
                continue
            res = jr.outcome.result or {}
            ok = jr.outcome.status == "done" and res.get("status") == "done" and (
                res.get("all_passed") if t.hidden else res.get("visible_passed"))
            score = None if jr.outcome.status == "lost" else t.points if ok else 0.0
            row.cells.append(CellScore(t.grade_id, t.points, score))
            short = _short(jr.outcome, res)
            if jr.retried_because:
                short += f" (retried once after {jr.retried_because[:120]})"
            if jr.outcome.output_dropped:
                short += f" (output capped: {jr.outcome.output_dropped} bytes dropped)"
            row.outcomes[t.exercise] = short
        row.cells = _per_cell(row.cells)
    return rows


def _cell_results(plan: _Plan, row: Row, by_key: dict) -> dict:
    """{grade_id: (summary, error)} of a row: the test cells' outputs in its clean notebook."""
    lay = plan.by_name[row.notebook]
    cell_results = {}
    for t in lay.tests:
        jr = by_key.get((row.student, row.notebook, t.exercise))
        res = (jr.outcome.result or {}) if jr else {}
        cs = next(c for c in row.cells if c.grade_id == t.grade_id)
        summary = _cell_summary(res, t.hidden)
        err = None if cs.score == cs.points and cs.points > 0 else (
            f"{t.exercise}: " + (res.get("first_failure") if t.hidden else res.get("first_visible_failure")
                                 or res.get("first_failure") or "") if res.get("status") == "done"
            else f"{t.exercise}: " + row.outcomes.get(t.exercise, "not graded"))
        if t.grade_id in cell_results:  # a cell with several checks: every summary, the first error
            before_summary, before_err = cell_results[t.grade_id]
            summary, err = before_summary + "\n" + summary, before_err or err
        cell_results[t.grade_id] = (summary, err)
    return cell_results


@contextlib.contextmanager
def _one_transaction(gb):
    """nbgrader's Gradebook commits after every call: here its commits only flush, and the run's
    writes are committed once at the end (or rolled back), so they land together or not at all."""
    session = gb.db
    commit = session.commit
    session.commit = session.flush
    try:
        yield
    except BaseException:
        session.commit = commit
        session.rollback()
        raise
    session.commit = commit
    commit()


def _record(gb, plan: _Plan, rows: list[Row], root: Path) -> list[str]:
    """Write one module's scores into the gradebook (inside the run's transaction); returns its
    notes. Cells not graded keep whatever score they had."""
    from nbgrader.api import MissingEntry

    module = plan.module
    notes = _ensure_assignment(gb, module, plan.layouts)
    autograded = root / "grading" / "autograded"
    for row, s in zip(rows, plan.subs):
        lay = plan.by_name[s.notebook]
        nb_path = autograded / s.student / module / f"{s.notebook}.ipynb"
        row.ours_before = False
        if nb_path.exists():
            try:
                prev = json.loads(nb_path.read_text())
                row.ours_before = MARK in prev.get("metadata", {})
                if not row.ours_before and s.nb is not None:
                    if submitted_answers(prev, lay) != submitted_answers(s.nb, lay):
                        row.reasons.append("the submitted notebook changed after nbgrader autograde read it")
                    row.reasons += _in_notebook_errors(prev, lay)
            except (ValueError, OSError, RecursionError, AttributeError, TypeError):
                pass
        gb.update_or_create_student(s.student)
        try:
            gb.find_submission(module, s.student)
        except MissingEntry:
            gb.add_submission(module, s.student)
        for c in row.cells:
            g = gb.find_grade(c.grade_id, s.notebook, module, s.student)
            if g.auto_score is not None and not row.ours_before:
                c.before = float(g.auto_score)
            if c.score is None:
                continue
            g.auto_score = c.score
            g.needs_manual_grade = g.manual_score is not None
            if g.manual_score is not None:
                row.reasons.append(f"{c.grade_id} has a manual score ({g.manual_score:g}), which nbgrader uses")
            if g.extra_credit:
                row.reasons.append(f"{c.grade_id} has extra credit ({g.extra_credit:g}), which nbgrader adds: the "
                                   "clean grade gives none (clear it in Formgrader unless you gave it)")
        gb.db.commit()
    return notes


def _write_atomic(path: Path, text: str) -> None:
    """Write a file whole or not at all: a temporary file beside it, then a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _write_notebooks(plan: _Plan, rows: list[Row], by_key: dict, root: Path, out_dir: Path, info: dict) -> None:
    """The clean autograded notebooks (for generate_feedback) of the rows graded whole."""
    autograded = root / "grading" / "autograded"
    for row, s in zip(rows, plan.subs):
        if s.nb is None or row.not_graded:
            continue
        nb_path = autograded / s.student / plan.module / f"{s.notebook}.ipynb"
        if nb_path.exists() and not row.ours_before:
            keep = out_dir / "notebook-runs" / s.student / nb_path.name
            keep.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(nb_path), keep)
        clean = _clean_notebook(plan.by_name[s.notebook], plan.answers_of.get((s.student, s.notebook), {}),
                                _cell_results(plan, row, by_key), info)
        _write_atomic(nb_path, json.dumps(clean, indent=1, ensure_ascii=False) + "\n")


def _cell_summary(res: dict, hidden: bool) -> str:
    if res.get("status") != "done":
        return ""
    lines = [ln for ln in res.get("summary", "").splitlines()]
    if not hidden:
        hidden_names = {c["name"] for c in res.get("cases", []) if c["hidden"]}
        lines = [ln for ln in lines if not any(f"'{n}'" in ln for n in hidden_names) and not ln.endswith("backend")]
    return "\n".join(lines)


def _per_cell(scores: list) -> list:
    """One CellScore per grade_id: a cell with several checks keeps its points only if all passed."""
    merged: dict = {}
    for c in scores:
        if c.grade_id not in merged:
            merged[c.grade_id] = CellScore(c.grade_id, c.points, c.score, c.before, c.why)
            continue
        m = merged[c.grade_id]
        m.score = None if None in (m.score, c.score) else min(m.score, c.score)
        m.why = m.why or c.why
    return list(merged.values())


def _in_notebook_errors(nb: dict, lay) -> list[str]:
    out = []
    tests = {t.grade_id for t in lay.tests}
    for cell in nb.get("cells", []):
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if gid in tests:
            for o in cell.get("outputs", []):
                if o.get("output_type") == "error" and o.get("ename") in ("CellTimeoutError", "DeadKernelError"):
                    out.append(f"in-notebook run: {o.get('ename')} in {gid}")
    return out


def _nvrtc_note() -> str | None:
    """The report's warning when submissions cannot also be compiled with NVRTC."""
    try:
        from cupy_backends.cuda.libs import nvrtc

        nvrtc.getVersion()
        return None
    except Exception as err:  # noqa: BLE001  (ImportError, or a CuPy without its NVRTC library)
        return (f"NVRTC is not installed ({type(err).__name__}): kernels were NOT also compiled with the GPU's "
                "compiler, so host C++ that g++ accepts (std::vector, <algorithm>) can pass on the emulator "
                "(pip install -e '.[nvrtc]', no GPU needed)")


def _verify_grader(root: Path) -> None:
    """Refuse to grade with a grader/ that differs from the course's git commit or from the grader
    running this command: code run with the instructor's permissions (a stock ``nbgrader
    autograde``) may have changed it, ``grader/autograde`` included."""
    problems = []
    try:
        out = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=all", "--",
                              "grader"], capture_output=True, text=True, timeout=60)
        in_git = out.returncode == 0 and subprocess.run(
            ["git", "-C", str(root), "ls-files", "--error-unmatch", "grader"], capture_output=True).returncode == 0
    except (OSError, subprocess.SubprocessError):
        in_git = False
    if in_git:
        problems += [f"{ln[3:]} (git: {ln[:2].strip()})" for ln in out.stdout.splitlines() if ln.strip()]
    running = Path(__file__).resolve().parents[1]
    course = (root / "grader").resolve()
    if running != course:
        mine, theirs = _manifest(running), _manifest(course)
        problems += [f"grader/{p} (differs from {running}/{p})" for p in sorted(set(mine) | set(theirs))
                     if mine.get(p) != theirs.get(p)]
    if problems:
        raise SystemExit(
            "grader/ is not the grader it should be: " + ", ".join(problems[:12])
            + (f" and {len(problems) - 12} more" if len(problems) > 12 else "")
            + ". Code run with your permissions (stock nbgrader autograde runs the students' notebooks so) may have "
              "changed it. Restore it (git checkout -- grader; git clean -fd grader) or, if you made the changes "
              "yourself, commit them; --grader-ref COMMIT grades with a commit's grader/.")


def _manifest(pkg: Path) -> dict:
    """{relative path: sha256} of a grader/ folder's files, caches left out."""
    return {p.relative_to(pkg).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(pkg.rglob("*")) if p.is_file() and "__pycache__" not in p.parts
            and ".ipynb_checkpoints" not in p.parts and p.suffix != ".pyc"}


def _no_leftover_processes(root: Path) -> None:
    """Refuse to start while processes of this user run from the course's grading/ folder: what a
    stock ``nbgrader autograde`` left behind (its notebooks run there) could change submissions,
    the gradebook or this run's files while it grades."""
    grading, me, found = (root / "grading").resolve(), os.getpid(), []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == me:
            continue
        try:
            if d.stat().st_uid != os.getuid():
                continue
            cwd = Path(os.readlink(d / "cwd"))
            if cwd == grading or grading in cwd.parents:
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
                found.append(f"pid {d.name} in {cwd}: {cmd[:120]}")
        except OSError:
            continue
    if found:
        raise SystemExit("processes are running from grading/ (left by a stock nbgrader autograde, or a notebook "
                         "open there): " + "; ".join(found[:10]) + ". Stop them (kill PID) and run again: they could "
                         "change submissions or the gradebook while the clean run grades.")


def _report(module, rows, subs, notes, seed, info, seconds, n_jobs, workers, scheduler, pool_jobs=None) -> dict:
    took = f"in {seconds:.0f} s" if pool_jobs in (None, n_jobs) else \
        f"among {pool_jobs} of several modules run together in {seconds:.0f} s"
    lines = [f"clean autograde of {module}: {len(rows)} notebook(s), {n_jobs} check(s) {took} "
             f"({'Dask ' + scheduler if scheduler else f'{workers} worker(s)'}; sandbox: {info['sandbox']}; "
             f"backend: {info['backend']})"]
    for n in notes:
        lines.append(f"note: {n}")
    lines.append("")
    lines.append(f"{'student':16} {'notebook':24} {'in-notebook':>11} {'clean':>9}  reasons")
    differ = []
    for r in rows:
        before = None if r.not_graded else r.before
        b = "-" if before is None else f"{before:g}"
        mark = ""
        if before is not None and before != r.score:
            mark = " *"
            differ.append(r)
        why = list(r.reasons)
        if before is not None and before != r.score:
            cells = [f"{c.grade_id} {c.before:g}->{c.score:g}" for c in r.cells if c.before != c.score]
            why.append("cells: " + ", ".join(cells))
        bad = [f"{ex}: {o}" for ex, o in r.outcomes.items() if not o.endswith("cases passed") or o.split("/")[0] != o.split("/")[1].split()[0]]
        if r.not_graded:
            why.insert(0, "NOT GRADED: " + ", ".join(r.not_graded) + " (old scores kept)")
        lines.append(f"{r.student:16} {r.notebook:24} {b:>11} {r.score:>4g}/{r.max_score:<4g}{mark}  "
                     + "; ".join(why + bad))
    lines.append("")
    lines.append(f"{len(differ)} submission(s) whose in-notebook score differs from the clean one (marked *).")
    missing = sum(len(r.not_graded) for r in rows)
    if missing:
        lines.append(f"NOT GRADED: {missing} cell(s) of {sum(bool(r.not_graded) for r in rows)} notebook(s): their "
                     f"checks did not run, so their gradebook scores were left as they were. "
                     f"`python -m grader autograde {module} --resume` runs only those checks.")
    js = {"module": module, "seed": seed, **info, "notes": notes, "seconds_checks": seconds, "checks": n_jobs,
          "rows": [{"student": r.student, "notebook": r.notebook, "score": r.score, "max_score": r.max_score,
                    "in_notebook": r.before, "differs": r in differ, "reasons": r.reasons, "outcomes": r.outcomes,
                    "not_graded": r.not_graded,
                    "cells": [c.__dict__ for c in r.cells],
                    "sha256": next((s.sha256 for s in subs if s.student == r.student and s.notebook == r.notebook), None)}
                   for r in rows]}
    return {"text": "\n".join(lines), "json": js}

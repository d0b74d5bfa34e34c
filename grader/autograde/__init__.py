"""``python -m grader autograde MODULE``: the authoritative grade, from a clean process.

nbgrader runs a student's notebook with the instructor's permissions: answer cells can replace
``check()``, fake the kernel runner, paste the reference, read the seed, or damage the course
and the gradebook. This command grades **instead of** ``nbgrader autograde`` (or after it, to
overwrite its scores and list the differences):

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
4. Scores go into the nbgrader gradebook (same ``grade_id``\\ s and points), a clean
   autograded notebook is written for ``nbgrader generate_feedback``, and a report
   (``grading/clean/MODULE/report.txt`` and ``.json``) lists every submission whose
   in-notebook score differs from the clean one, with the reasons found.

Hidden-case shapes: the exercises declare fixed shapes and, in ``hidden_sizes``, which sizes may
vary and the unit (tile or block) each is cut into; :mod:`.shapes` redraws those per student,
keeping each value's class in its unit, and leaves every other parameter as declared.
"""
from __future__ import annotations

import copy
import hashlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..course import ROOT
from .engine import Job, Progress, derive_seed, run_dask, run_local
from .notebook import load_layout, split_magic, submitted_answers, suspicious
from .runtime import Bundle, bundle_from_dir, bundle_from_git, bundle_hash, ensure_runtime, remove_runtime
from .sandbox import Limits, bwrap_path

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
    score: float
    before: float | None = None
    why: str = ""


@dataclass
class Row:
    student: str
    notebook: str
    cells: list = field(default_factory=list)
    reasons: list = field(default_factory=list)
    outcomes: dict = field(default_factory=dict)  # exercise -> short status

    @property
    def score(self) -> float:
        return sum(c.score for c in self.cells)

    @property
    def max_score(self) -> float:
        return sum(c.points for c in self.cells)

    @property
    def before(self) -> float | None:
        if any(c.before is None for c in self.cells):
            return None
        return sum(c.before for c in self.cells)


def _read_submissions(root: Path, submitted: Path, module: str, layouts, students=None) -> list[Submission]:
    subs = []
    if not submitted.is_dir():
        return subs
    for sdir in sorted(p for p in submitted.iterdir() if p.is_dir()):
        if students and sdir.name not in students:
            continue
        mdir = sdir / module
        if not mdir.is_dir():
            continue
        for lay in layouts:
            path = mdir / f"{lay.name}.ipynb"
            if not path.is_file():
                subs.append(Submission(sdir.name, lay.name, None, None, None, "notebook not handed in"))
                continue
            data = path.read_bytes()
            try:
                nb = json.loads(data.decode())
                if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
                    raise ValueError("no cells")
                problem = None
            except (ValueError, UnicodeDecodeError) as err:
                nb, problem = None, f"notebook unreadable ({err})"
            subs.append(Submission(sdir.name, lay.name, path, hashlib.sha256(data).hexdigest(), nb, problem))
    return subs


def _db_url(root: Path, db: str | None) -> str:
    if db:
        return db if "://" in db else "sqlite:///" + str(Path(db).resolve())
    return "sqlite:///" + str((root / "grading" / "gradebook.db").resolve())


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
              out_dir: str | Path | None = None, write_notebooks: bool = True, fresh_runtime: bool = False,
              quiet: bool = False, progress_stream=None, keep_runtime: bool = True) -> dict:
    """Grade one module (returns its result) or several (a list: returns {module: result}). The
    checks of several modules share one pool, so no worker waits for a module's last check while
    another module's are queued."""
    t0 = time.monotonic()
    root = Path(root).resolve()
    limits = limits or Limits()
    say = (lambda *a: None) if quiet else (lambda *a: print(*a, flush=True))
    modules = [module] if isinstance(module, str) else list(module)
    if out_dir is not None and len(modules) > 1:
        raise SystemExit("out_dir names one module's report folder: grade one module with it")
    submitted = Path(submissions)
    submitted = submitted if submitted.is_absolute() else root / submitted
    if seed is None:
        env = os.environ.get("GRADER_SEED")
        seed = int(env) if env else secrets.randbits(62)
    sandbox = bwrap_path() is not None
    shared_notes = [] if sandbox else [
        "bwrap (bubblewrap) is not installed, or cannot make a sandbox on this machine (unprivileged user "
        "namespaces off): each check ran in its own process and session with rlimits, but WITHOUT "
        "file-system, network or PID isolation (apt-get install bubblewrap; `python -m grader doctor` says which)."]
    plans = [_plan(root, m, submitted, students, seed, backend, draw_shapes) for m in modules]

    # ------------------------------------------------------------------ the pristine grader
    if grader_ref:
        data = bundle_from_git(root, grader_ref)
    else:
        data = bundle_from_dir(root / "grader")
        dirty = _git_dirty(root)
        if dirty:
            shared_notes.append("grader/ differs from the git commit (graded with the working tree's copy; "
                                "--grader-ref HEAD grades with the commit): " + ", ".join(dirty[:12]))
    digest = bundle_hash(data)
    run_id = secrets.token_hex(4) if (fresh_runtime or not sandbox) else "shared"
    bundle = Bundle(data, digest, run_id)
    n_workers = workers or os.cpu_count() or 1
    jobs = [Job((plan.module,) + job.key, job.payload) for plan in plans for job in plan.jobs]
    progress = Progress(len(jobs), n_workers if not scheduler else 0, progress_stream, every_s=0 if quiet else 5.0)
    if quiet and progress_stream is None:
        progress = None
    for plan in plans:
        say(f"autograde {plan.module}: {len(plan.subs)} notebook(s), {len(plan.jobs)} check(s), "
            + (f"Dask scheduler {scheduler}" if scheduler else f"{n_workers} worker(s)")
            + ("" if sandbox else " (NO SANDBOX: bwrap missing)"))
    t_jobs = time.monotonic()
    rt = None
    if scheduler:
        results = run_dask(scheduler, bundle, jobs, limits, progress)
    else:
        rt = ensure_runtime(bundle, limits)
        t_jobs = time.monotonic()
        results = run_local(rt, jobs, limits, n_workers, progress)
    seconds_checks = time.monotonic() - t_jobs
    job_seconds = sum(r.outcome.seconds for r in results)  # the workers' busy time, to tell idling from slowing
    by_key = {r.key: r for r in results}

    info = {"seed_digest": hashlib.sha256(str(seed).encode()).hexdigest()[:12], "grader": digest,
            "sandbox": "bwrap" if sandbox else "none", "backend": backend}
    outs = {}
    for plan in plans:
        mine = {key[1:]: r for key, r in by_key.items() if key[0] == plan.module}
        outs[plan.module] = _finish(plan, mine, root, db, out_dir, write_notebooks, shared_notes, seed, info,
                                    seconds_checks, n_workers, scheduler, say, len(jobs))
    if rt is not None and not keep_runtime and run_id != "shared":
        remove_runtime(rt)
    for out in outs.values():
        out["seconds"] = time.monotonic() - t0
        out["pool_job_seconds"] = job_seconds
    return outs[modules[0]] if isinstance(module, str) else outs


@dataclass
class _Plan:
    """One module's submissions and the checks they need."""
    module: str
    layouts: list
    subs: list
    jobs: list
    answers_of: dict
    notes: list

    @property
    def by_name(self) -> dict:
        return {lay.name: lay for lay in self.layouts}


def _plan(root: Path, module: str, submitted: Path, students, seed: int, backend: str, draw_shapes: bool) -> _Plan:
    layouts = load_layout(root, module)
    if not layouts:
        raise SystemExit(f"no released notebook in {root / 'exercises' / module}")
    subs = _read_submissions(root, submitted, module, layouts, students)
    by_name = {lay.name: lay for lay in layouts}
    notes = [f"{lay.name}: {p}" for lay in layouts for p in lay.problems]
    jobs, answers_of = [], {}
    for s in subs:
        if s.nb is None:
            continue
        lay = by_name[s.notebook]
        answers = submitted_answers(s.nb, lay)
        answers_of[(s.student, s.notebook)] = answers
        for ex in lay.exercises:
            kernel = next(t.kernel_var for t in lay.tests if t.exercise == ex)
            cell = lay.answer_for(kernel)
            src = answers.get(cell.grade_id) if cell else None
            name, options, body = split_magic(src) if src is not None else (None, (), "")
            if src is None or name is None:
                continue
            payload = {"kind": "check", "exercise": ex, "source": body, "options": list(options),
                       "seed": derive_seed(seed, s.student, ex, "cases"),
                       "shape_seed": derive_seed(seed, s.student, ex, "shapes"),
                       "backend": backend, "draw_shapes": draw_shapes}
            jobs.append(Job((s.student, s.notebook, ex), payload))
    return _Plan(module, layouts, subs, jobs, answers_of, notes)


def _finish(plan: _Plan, by_key: dict, root: Path, db, out_dir, write_notebooks: bool, shared_notes: list,
            seed: int, info: dict, seconds_checks: float, n_workers: int, scheduler, say, pool_jobs: int) -> dict:
    """One module's scores into the gradebook, its clean notebooks and its report."""
    module, layouts, subs, by_name, answers_of = plan.module, plan.layouts, plan.subs, plan.by_name, plan.answers_of
    notes = shared_notes + plan.notes
    # ------------------------------------------------------------------ scores
    rows = []
    for s in subs:
        lay = by_name[s.notebook]
        row = Row(s.student, s.notebook)
        rows.append(row)
        if s.nb is None:
            row.reasons.append(s.problem)
        else:
            row.reasons += suspicious(s.nb, lay)
        answers = answers_of.get((s.student, s.notebook), {})
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
            row.cells.append(CellScore(t.grade_id, t.points, t.points if ok else 0.0))
            short = _short(jr.outcome, res)
            if jr.retried_because:
                short += f" (retried once after {jr.retried_because[:120]})"
            if jr.outcome.output_dropped:
                short += f" (output capped: {jr.outcome.output_dropped} bytes dropped)"
            row.outcomes[t.exercise] = short
        row.cells = _per_cell(row.cells)

    # ------------------------------------------------------------------ gradebook, notebooks
    from nbgrader.api import Gradebook, MissingEntry

    # nbgrader's Gradebook runs `alembic` as a subprocess: this interpreter's bin/ first on PATH
    bindir = str(Path(sys.executable).parent)
    if not os.environ.get("PATH", "").startswith(bindir + os.pathsep):
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    out_dir = Path(out_dir) if out_dir else root / "grading" / "clean" / module
    out_dir.mkdir(parents=True, exist_ok=True)
    autograded = root / "grading" / "autograded"
    url = _db_url(root, db)
    import warnings

    with Gradebook(url) as gb, warnings.catch_warnings():
        # nbgrader's add_submission trips SQLAlchemy autoflush warnings; harmless
        warnings.simplefilter("ignore")
        notes += _ensure_assignment(gb, module, layouts)
        for row, s in zip(rows, subs):
            lay = by_name[s.notebook]
            nb_path = autograded / s.student / module / f"{s.notebook}.ipynb"
            ours_before = False
            if nb_path.exists():
                try:
                    prev = json.loads(nb_path.read_text())
                    ours_before = MARK in prev.get("metadata", {})
                    if not ours_before and s.nb is not None:
                        if submitted_answers(prev, lay) != submitted_answers(s.nb, lay):
                            row.reasons.append("the submitted notebook changed after nbgrader autograde read it")
                        row.reasons += _in_notebook_errors(prev, lay)
                except (ValueError, OSError):
                    pass
            gb.update_or_create_student(s.student)
            try:
                gb.find_submission(module, s.student)
            except MissingEntry:
                gb.add_submission(module, s.student)
            for c in row.cells:
                g = gb.find_grade(c.grade_id, s.notebook, module, s.student)
                if g.auto_score is not None and not ours_before:
                    c.before = float(g.auto_score)
                g.auto_score = c.score
                g.needs_manual_grade = g.manual_score is not None
                if g.manual_score is not None:
                    row.reasons.append(f"{c.grade_id} has a manual score ({g.manual_score:g}), which nbgrader uses")
            gb.db.commit()
            if write_notebooks and s.nb is not None:
                if nb_path.exists() and not ours_before:
                    keep = out_dir / "notebook-runs" / s.student / nb_path.name
                    keep.parent.mkdir(parents=True, exist_ok=True)
                    shutil.move(str(nb_path), keep)
                cell_results = {}
                for t in lay.tests:
                    jr = by_key.get((s.student, s.notebook, t.exercise))
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
                clean = _clean_notebook(lay, answers_of.get((s.student, s.notebook), {}), cell_results, info)
                nb_path.parent.mkdir(parents=True, exist_ok=True)
                nb_path.write_text(json.dumps(clean, indent=1, ensure_ascii=False) + "\n")

    report = _report(module, rows, subs, notes, seed, info, seconds_checks, len(plan.jobs), n_workers, scheduler,
                     pool_jobs)
    (out_dir / "report.json").write_text(json.dumps(report["json"], indent=1) + "\n")
    (out_dir / "report.txt").write_text(report["text"] + "\n")
    say(report["text"])
    say(f"report: {out_dir / 'report.txt'}  (seed and details: report.json, instructor only)")
    return {"rows": rows, "report": report["json"], "text": report["text"],
            "seconds_checks": seconds_checks, "checks": len(plan.jobs), "out_dir": out_dir, "seed": seed}




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
        m.score = min(m.score, c.score)
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


def _git_dirty(root: Path) -> list[str]:
    try:
        out = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", "grader"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return []
    return [ln[3:] for ln in out.stdout.splitlines() if ln.strip() and not ln[3:].startswith("grader/autograde")]


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
        before = r.before
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
        lines.append(f"{r.student:16} {r.notebook:24} {b:>11} {r.score:>4g}/{r.max_score:<4g}{mark}  "
                     + "; ".join(why + bad))
    lines.append("")
    lines.append(f"{len(differ)} submission(s) whose in-notebook score differs from the clean one (marked *).")
    js = {"module": module, "seed": seed, **info, "notes": notes, "seconds_checks": seconds, "checks": n_jobs,
          "rows": [{"student": r.student, "notebook": r.notebook, "score": r.score, "max_score": r.max_score,
                    "in_notebook": r.before, "differs": r in differ, "reasons": r.reasons, "outcomes": r.outcomes,
                    "cells": [c.__dict__ for c in r.cells],
                    "sha256": next((s.sha256 for s in subs if s.student == r.student and s.notebook == r.notebook), None)}
                   for r in rows]}
    return {"text": "\n".join(lines), "json": js}

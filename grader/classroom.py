"""The classroom side of the course: releasing exercises and grading them with nbgrader.

Everything here drives nbgrader's own command line (``python -m nbgrader ...``) with the
repository's ``nbgrader_config.py``, in a temporary course directory, so the repository's own
gradebook (``grading/gradebook.db``) is never touched:

* :func:`release` regenerates ``exercises/`` (student notebooks) and ``solutions/`` from
  ``notebooks/`` for every module (``python -m grader release``).
* :func:`stale` lists the modules whose committed ``exercises/`` or ``solutions/`` differ from
  a fresh regeneration (what CI checks).
* :func:`demo` releases every module, grades three made-up students and prints the score table
  (``python -m grader demo``): the whole instructor workflow in a few minutes, on the CPU
  emulator or a GPU.

nbgrader's output is byte-identical between runs, so regenerating and comparing is exact.
"""
from __future__ import annotations

import copy
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .course import MAGIC, ROOT, modules as course_modules

CONFIG = "nbgrader_config.py"
SOURCE, RELEASE, SOLUTION = "notebooks", "exercises", "solutions"
SUBMITTED, AUTOGRADED, FEEDBACK = "grading/submitted", "grading/autograded", "grading/feedback"
GRADEBOOK = "grading/gradebook.db"
DEMO_STUDENTS = {
    "ada": "the full solutions",
    "blank": "the release, untouched",
    "bug": "the solutions with one typical bug in one kernel per module",
}
_IGNORE = shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__", "*.pyc")


class NbgraderError(RuntimeError):
    """An nbgrader command failed; the message holds the command and the end of its log."""


# --------------------------------------------------------------------------- running nbgrader


def nbgrader_env() -> dict:
    """The environment for nbgrader: this interpreter's bin/ first on PATH (nbgrader runs
    ``alembic`` as a subprocess and must find the one installed next to it)."""
    env = dict(os.environ)
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    return env


def nbgrader(args: list[str], course_dir: Path, *, check: bool = True, timeout: float | None = None) -> subprocess.CompletedProcess:
    """Run ``nbgrader ARGS`` in ``course_dir`` (where its ``nbgrader_config.py`` is read).

    Returns the completed process (stdout and stderr as text). With ``check`` a non-zero exit
    raises :class:`NbgraderError`. ``autograde`` exits 1 when a submission could not be graded
    (a crashed or unresponsive kernel) after grading all the others: call it with
    ``check=False`` and read the gradebook."""
    proc = subprocess.run(
        [sys.executable, "-m", "nbgrader", *args],
        cwd=course_dir, env=nbgrader_env(), capture_output=True, text=True, timeout=timeout,
    )
    if check and proc.returncode != 0:
        log = (proc.stdout + proc.stderr).strip().splitlines()
        raise NbgraderError(f"`nbgrader {' '.join(args)}` failed (exit {proc.returncode}) in {course_dir}:\n" + "\n".join(log[-40:]))
    return proc


def make_course(root: Path, dest: Path, modules: list[str] | None = None) -> Path:
    """A course directory at ``dest`` holding the repository's nbgrader config and the source
    notebooks of ``modules`` (default: all); nbgrader commands can then run there."""
    root, dest = Path(root), Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(root / CONFIG, dest / CONFIG)
    for m in modules if modules is not None else course_modules(root):
        target = dest / SOURCE / m
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(root / SOURCE / m, target, ignore=_IGNORE)
    (dest / "grading").mkdir(exist_ok=True)
    return dest


def generate(course_dir: Path) -> None:
    """``generate_assignment`` and ``generate_solution`` for every module of a course directory."""
    nbgrader(["generate_assignment", "*", "--force"], course_dir)
    nbgrader(["generate_solution", "*", "--force"], course_dir)


def _files(folder: Path) -> dict[str, bytes]:
    if not folder.is_dir():
        return {}
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# --------------------------------------------------------------------------- release / stale


def release(root: Path | str = ROOT, modules: list[str] | None = None) -> dict:
    """Regenerate ``exercises/`` and ``solutions/`` from ``notebooks/`` with nbgrader's own
    ``generate_assignment`` and ``generate_solution`` (this repository's config: CUDA stubs in
    ``%%cuda`` cells, hidden tests removed from exercises, outputs cleared).

    Runs in a temporary course directory and copies the result back, so the repository's
    gradebook is not touched and a module's folders hold exactly what nbgrader wrote. With
    ``modules=None`` every module is released and folders of modules that no longer exist
    are removed. Byte-identical between runs. Returns ``{"modules": [...], "exercises": path,
    "solutions": path}``."""
    root = Path(root)
    everything = modules is None
    modules = course_modules(root) if everything else list(modules)
    with tempfile.TemporaryDirectory(prefix="fa-release-") as tmp:
        course = make_course(root, Path(tmp) / "course", modules)
        generate(course)
        for folder in (RELEASE, SOLUTION):
            (root / folder).mkdir(exist_ok=True)
            for m in modules:
                if (root / folder / m).exists():
                    shutil.rmtree(root / folder / m)
                shutil.copytree(course / folder / m, root / folder / m)
            if everything:
                for old in (root / folder).iterdir():
                    if old.is_dir() and old.name not in modules:
                        shutil.rmtree(old)
    return {"modules": modules, "exercises": root / RELEASE, "solutions": root / SOLUTION}


def stale(root: Path | str = ROOT) -> list[str]:
    """Modules whose committed ``exercises/`` or ``solutions/`` differ from a fresh
    regeneration (compared byte for byte in a temporary copy; the repository is not changed),
    plus folders there that belong to no module. Empty when everything is up to date; else
    run ``python -m grader release``."""
    root = Path(root)
    modules = course_modules(root)
    out = []
    with tempfile.TemporaryDirectory(prefix="fa-stale-") as tmp:
        course = make_course(root, Path(tmp) / "course", modules)
        generate(course)
        for m in modules:
            if any(_files(root / f / m) != _files(course / f / m) for f in (RELEASE, SOLUTION)):
                out.append(m)
    for folder in (RELEASE, SOLUTION):
        if (root / folder).is_dir():
            out += [p.name for p in (root / folder).iterdir() if p.is_dir() and p.name not in modules and p.name not in out]
    return sorted(out)


# --------------------------------------------------------------------------- submissions


def read_nb(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def write_nb(nb: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")


def _source(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _grade_id(cell) -> str | None:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def _is_answer(cell) -> bool:
    return bool(cell.get("metadata", {}).get("nbgrader", {}).get("solution"))


def answer_cells(nb: dict) -> dict[str, str]:
    """``{grade_id: source}`` of a notebook's answer (nbgrader "solution") cells."""
    return {_grade_id(c): _source(c) for c in nb["cells"] if _is_answer(c)}


def fill_answers(release_nb: dict, answers: dict[str, str]) -> dict:
    """A copy of a released notebook with its answer cells replaced by ``answers`` (by
    grade_id): what a student who wrote those answers submits."""
    nb = copy.deepcopy(release_nb)
    for cell in nb["cells"]:
        gid = _grade_id(cell)
        if _is_answer(cell) and gid in answers:
            cell["source"] = answers[gid]
    return nb


_BOUND = re.compile(r"(?<![<>=!])\s(<|>=)\s(?![<=])")


def inject_bug(source: str) -> tuple[str, str] | None:
    """A typical off-by-one in a ``%%cuda`` answer: the first ``a < b`` becomes ``a <= b`` (or
    ``a >= b`` becomes ``a > b``): a bounds guard or a loop that runs one element too far.
    Looks inside the solution region first, then anywhere in the kernel (comments and the
    magic line excluded). Returns ``(buggy source, description)``, or None if nothing matches."""
    lines = source.split("\n")
    inside = [False] * len(lines)
    state = False
    for i, line in enumerate(lines):
        if "BEGIN SOLUTION" in line:
            state = True
        elif "END SOLUTION" in line:
            state = False
        else:
            inside[i] = state
    for wanted in (True, False):
        for i, line in enumerate(lines):
            if (wanted and not inside[i]) or line.lstrip().startswith(MAGIC):
                continue
            code = line.split("//", 1)[0]
            m = _BOUND.search(code)
            if m:
                new = " <= " if m.group(1) == "<" else " > "
                fixed = code[: m.start()] + new + code[m.end():]
                lines[i] = fixed + line[len(code):]
                return "\n".join(lines), f"off-by-one: `{code.strip()}` -> `{fixed.strip()}`"
    return None


def buggy_answers(answers: dict[str, str]) -> tuple[dict[str, str], str]:
    """``answers`` with :func:`inject_bug` applied to the first ``%%cuda`` answer it changes."""
    for gid, src in answers.items():
        if not src.lstrip().startswith(MAGIC):
            continue
        hit = inject_bug(src)
        if hit:
            kernel = src.lstrip().split("\n", 1)[0].split()[1]
            return {**answers, gid: hit[0]}, f"{kernel}: {hit[1]}"
    return dict(answers), "no bug injected (no bound to shift in a %%cuda answer)"


def submit(course_dir: Path, student: str, module: str, nb: dict, name: str) -> Path:
    """Place a notebook where ``nbgrader collect`` would: grading/submitted/STUDENT/MODULE/NAME."""
    path = Path(course_dir) / SUBMITTED / student / module / name
    write_nb(nb, path)
    return path


# --------------------------------------------------------------------------- grades


@dataclass
class Score:
    score: float
    max_score: float
    needs_manual_grade: bool  # nbgrader could not grade it all (e.g. the kernel crashed)

    def __str__(self) -> str:
        flag = " !" if self.needs_manual_grade else ""
        return f"{self.score:g}/{self.max_score:g}{flag}"


def scores(course_dir: Path) -> dict[str, dict[str, Score]]:
    """``{student: {module: Score}}`` from a course directory's gradebook."""
    from nbgrader.api import Gradebook

    table: dict[str, dict[str, Score]] = {}
    url = "sqlite:///" + str((Path(course_dir) / GRADEBOOK).resolve())
    with Gradebook(url) as gb:
        for a in gb.assignments:
            for s in a.submissions:
                table.setdefault(s.student_id, {})[a.name] = Score(float(s.score), float(s.max_score), bool(s.needs_manual_grade))
    return table


def format_table(table: dict[str, dict[str, Score]], modules: list[str]) -> str:
    """The score table as text: one row per student, one column per module, and the total."""
    rows = [["student", *modules, "total"]]
    for student in sorted(table):
        cells, got, most = [], 0.0, 0.0
        for m in modules:
            s = table[student].get(m)
            cells.append(str(s) if s else "-")
            if s:
                got, most = got + s.score, most + s.max_score
        rows.append([student, *cells, f"{got:g}/{most:g}"])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


# --------------------------------------------------------------------------- demo


def demo(root: Path | str = ROOT, out: Path | str | None = None, modules: list[str] | None = None, quiet: bool = False) -> dict:
    """The instructor workflow end to end, in a throwaway course directory.

    Releases every module (``generate_assignment``, ``generate_solution``), hands in three
    students' notebooks under ``grading/submitted/<student>/<module>/`` (``ada``: the full
    solutions; ``blank``: the release untouched; ``bug``: the solutions with a typical
    off-by-one in one kernel per module), runs ``autograde``, ``generate_feedback`` and
    ``export`` (CSV), and prints a score table. The repository's own gradebook is never
    touched. ``out``: where to build the course (default: a new temporary folder, kept so the
    feedback can be read). Returns a dict: ``course``, ``modules``, ``scores``
    (``{student: {module: Score}}``), ``table`` (the text printed), ``csv``, ``feedback``,
    ``bugs`` (``{module: what was changed}``), ``flagged`` (``[(student, module)]`` nbgrader
    could not grade), ``ok`` (ada has full marks, blank none, bug less than ada in every
    module with a bug, nothing flagged) and ``seconds``."""
    t0 = time.perf_counter()
    root = Path(root)
    modules = course_modules(root) if modules is None else list(modules)
    course = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="fa-course-demo-"))
    if (course / "grading").exists():
        shutil.rmtree(course / "grading")
    say = (lambda *a: None) if quiet else (lambda *a: print(*a, flush=True))

    say(f"demo course: {course}")
    make_course(root, course, modules)
    say(f"releasing {len(modules)} module(s): nbgrader generate_assignment, generate_solution")
    generate(course)

    bugs = {}
    for m in modules:
        for rel in sorted((course / RELEASE / m).glob("*.ipynb")):
            released = read_nb(rel)
            answers = answer_cells(read_nb(course / SOLUTION / m / rel.name))
            broken, what = buggy_answers(answers)
            bugs[m] = what
            submit(course, "ada", m, fill_answers(released, answers), rel.name)
            submit(course, "blank", m, released, rel.name)
            submit(course, "bug", m, fill_answers(released, broken), rel.name)
    for m, what in bugs.items():
        say(f"  bug in {m}: {what}")

    say("grading: nbgrader autograde, generate_feedback, export")
    graded = nbgrader(["autograde", "*", "--force"], course, check=False)
    nbgrader(["generate_feedback", "*", "--force"], course)
    csv_path = course / "grading" / "grades.csv"
    nbgrader(["export", "--to", str(csv_path)], course)

    table = scores(course)
    flagged = sorted((st, m) for st, row in table.items() for m, s in row.items() if s.needs_manual_grade)
    text = format_table(table, modules)
    seconds = time.perf_counter() - t0
    ok = not flagged and all(
        (a := table.get("ada", {}).get(m)) is not None and a.score == a.max_score > 0
        and (b := table.get("blank", {}).get(m)) is not None and b.score == 0
        and (u := table.get("bug", {}).get(m)) is not None
        and (u.score < a.score or bugs[m].startswith("no bug"))
        for m in modules
    )
    say("")
    say(text)
    if flagged:
        say("! = nbgrader could not grade it all (flagged for manual grading): "
            + ", ".join(f"{st}/{m}" for st, m in flagged))
    if graded.returncode != 0 and not flagged:
        say("nbgrader autograde reported errors:\n" + "\n".join((graded.stdout + graded.stderr).splitlines()[-20:]))
    say("")
    say(f"feedback (HTML): {course / FEEDBACK}/<student>/<module>/")
    say(f"grades (CSV):    {csv_path}")
    say(f"gradebook:       {course / GRADEBOOK}")
    say(f"done in {seconds:.0f} s" + ("" if ok else ": UNEXPECTED SCORES (expected ada full marks, blank 0, bug below ada)"))
    return {
        "course": course,
        "modules": modules,
        "scores": table,
        "table": text,
        "csv": csv_path,
        "feedback": course / FEEDBACK,
        "bugs": bugs,
        "flagged": flagged,
        "ok": ok,
        "seconds": seconds,
    }


def read_csv(path: Path) -> list[dict]:
    """Rows of an ``nbgrader export`` CSV file."""
    with open(path, newline="") as f:
        return list(csv.DictReader(f))

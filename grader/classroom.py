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


def release(root: Path | str = ROOT, modules: list[str] | None = None, quiet: bool = False) -> dict:
    """Regenerate ``exercises/`` and ``solutions/`` from ``notebooks/`` with nbgrader's own
    ``generate_assignment`` and ``generate_solution`` (this repository's config: CUDA stubs in
    ``%%cuda`` cells, hidden tests removed from exercises, outputs cleared).

    Runs in a temporary course directory and copies the result back, so the repository's
    gradebook is not touched and a module's folders hold exactly what nbgrader wrote. With
    ``modules=None`` every module is released and folders of modules that no longer exist
    are removed. Byte-identical between runs. Prints one line per module unless ``quiet``.
    Returns ``{"modules": [...], "exercises": path, "solutions": path}``."""
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
    if not quiet:
        for m in modules:
            print(f"released {m}: {RELEASE}/{m}/, {SOLUTION}/{m}/")
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


def bug_candidates(source: str):
    """Typical off-by-one bugs for a ``%%cuda`` answer, most likely first: each ``a < b``
    becomes ``a <= b`` (and ``a >= b`` becomes ``a > b``), one at a time: a bounds guard or a
    loop that runs one element too far. Lines inside the solution region come first, then the
    rest of the kernel (comments and the magic line excluded). Yields ``(buggy source,
    description)``. The description quotes a changed line only when it lies outside the solution
    region (code every student is given); inside it, it names the line and the operator, so that
    the demo's report never prints a line of the solution."""
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
            if inside[i] != wanted or line.lstrip().startswith(MAGIC):
                continue
            code = line.split("//", 1)[0]
            for m in _BOUND.finditer(code):
                new = " <= " if m.group(1) == "<" else " > "
                fixed = code[: m.start()] + new + code[m.end():]
                buggy = lines[:i] + [fixed + line[len(code):]] + lines[i + 1:]
                if inside[i]:
                    what = f"off-by-one on line {i + 1} of the cell (solution region): `{m.group(1)}` -> `{new.strip()}`"
                else:
                    what = f"off-by-one: `{code.strip()}` -> `{fixed.strip()}`"
                yield "\n".join(buggy), what


def inject_bug(source: str) -> tuple[str, str] | None:
    """The first of :func:`bug_candidates`, or None when the kernel has no bound to shift."""
    return next(bug_candidates(source), None)


def _fails_its_check(module: str, cell_source: str) -> bool | None:
    """Whether a ``%%cuda`` answer fails the visible cases of its exercise (None: unknown, e.g.
    no exercise declared for that kernel, or kernels cannot run here)."""
    try:
        from .checks import REGISTRY, get_exercise, run_check

        get_exercise("vector_add")  # registers every module's exercises
        magic, _, body = cell_source.lstrip().partition("\n")
        words = magic.split()
        ex = next((e for e in REGISTRY.values() if e.module == module and e.kernel == words[1]), None)
        if ex is None:
            return None
        return not run_check(ex.id, body, options=tuple(words[2:])).passed
    except Exception:  # noqa: BLE001  (a demo convenience: fall back to an unverified bug)
        return None


def buggy_answers(answers: dict[str, str], module: str | None = None) -> tuple[dict[str, str], str]:
    """``answers`` with one off-by-one (:func:`bug_candidates`) in one ``%%cuda`` answer.

    With ``module``, each candidate is first run against its exercise's visible cases and the
    first one that really fails is used (shifting a bound is not always a bug: a loop may
    also stop at a guard); without it, or when that cannot be checked, the first candidate."""
    fallback, tries = None, 8
    for gid, src in answers.items():
        if not src.lstrip().startswith(MAGIC):
            continue
        kernel = src.lstrip().split("\n", 1)[0].split()[1]
        for buggy, what in bug_candidates(src):
            found = ({**answers, gid: buggy}, f"{kernel}: {what}")
            fallback = fallback or found
            verdict = _fails_its_check(module, buggy) if module and tries > 0 else None
            tries -= 1
            if verdict is None:
                return fallback
            if verdict:
                return found
    if fallback:
        return fallback[0], fallback[1] + " (passes the visible cases)"
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


TRITON_MODULE = "12_triton"


def _triton_installed() -> bool:
    from importlib.util import find_spec

    return find_spec("triton") is not None and find_spec("torch") is not None


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
    could not grade), ``ok`` (ada has full marks, blank none, bug less than ada wherever a bug
    was injected, nothing flagged), ``seconds`` and ``stages`` (seconds per step).

    The ``bug`` kernel is an off-by-one (:func:`bug_candidates`) checked against the
    exercise's visible cases before it is handed in, so it really is a bug."""
    t0 = time.perf_counter()
    root = Path(root)
    skipped = []
    if modules is None:
        modules = course_modules(root)
        if not _triton_installed():  # module 12's cells need the optional Triton extra
            skipped = [m for m in modules if m == TRITON_MODULE]
            modules = [m for m in modules if m != TRITON_MODULE]
    modules = list(modules)
    course = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="fa-course-demo-"))
    if course.exists() and any(course.iterdir()):
        if not (course / CONFIG).exists():
            raise FileExistsError(f"{course} is not empty and not a previous demo course: give an empty or new folder")
        for sub in (SOURCE, RELEASE, SOLUTION, "grading"):
            if (course / sub).exists():
                shutil.rmtree(course / sub)
    say = (lambda *a: None) if quiet else (lambda *a: print(*a, flush=True))

    say(f"demo course: {course}")
    for m in skipped:
        say(f"{m} left out: Triton and PyTorch are not installed (pip install -e '.[triton]')")
    make_course(root, course, modules)
    say(f"releasing {len(modules)} module(s): nbgrader generate_assignment, generate_solution")
    generate(course)
    stages = {"release": time.perf_counter() - t0}

    bugs = {}
    for m in modules:
        for rel in sorted((course / RELEASE / m).glob("*.ipynb")):
            released = read_nb(rel)
            answers = answer_cells(read_nb(course / SOLUTION / m / rel.name))
            broken, what = buggy_answers(answers, module=m)
            bugs[m] = what
            submit(course, "ada", m, fill_answers(released, answers), rel.name)
            submit(course, "blank", m, released, rel.name)
            submit(course, "bug", m, fill_answers(released, broken), rel.name)
    for student, what in DEMO_STUDENTS.items():
        say(f"  {student:6} hands in {what}")
    for m, what in bugs.items():
        say(f"  bug in {m}: {what}")

    stages["submissions"] = time.perf_counter() - t0 - sum(stages.values())
    say("grading: nbgrader autograde, generate_feedback, export")
    graded = nbgrader(["autograde", "*", "--force"], course, check=False)
    stages["autograde"] = time.perf_counter() - t0 - sum(stages.values())
    nbgrader(["generate_feedback", "*", "--force"], course)
    stages["feedback"] = time.perf_counter() - t0 - sum(stages.values())
    csv_path = course / "grading" / "grades.csv"
    nbgrader(["export", "--to", str(csv_path)], course)
    stages["export"] = time.perf_counter() - t0 - sum(stages.values())

    table = scores(course)
    flagged = sorted((st, m) for st, row in table.items() for m, s in row.items() if s.needs_manual_grade)
    text = format_table(table, modules)
    seconds = time.perf_counter() - t0
    ok = not flagged and all(
        (a := table.get("ada", {}).get(m)) is not None and a.score == a.max_score > 0
        and (b := table.get("blank", {}).get(m)) is not None and b.score == 0
        and (u := table.get("bug", {}).get(m)) is not None
        and (u.score < a.score or bugs[m].startswith("no bug") or bugs[m].endswith("(passes the visible cases)"))
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
    say(f"done in {seconds:.0f} s (" + ", ".join(f"{k} {v:.0f} s" for k, v in stages.items()) + ")" + ("" if ok else ": UNEXPECTED SCORES (expected ada full marks, blank 0, bug below ada)"))
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
        "stages": stages,
    }


def read_csv(path: Path) -> list[dict]:
    """Rows of an ``nbgrader export`` CSV file."""
    with open(path, newline="") as f:
        return list(csv.DictReader(f))

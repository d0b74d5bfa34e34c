"""What to grade in a submitted notebook, decided by the released and source notebooks only.

* Graded kernels: the released notebook's answer cells (nbgrader ``solution`` cells whose
  first line is ``%%cuda NAME``), by ``grade_id``. From the submission only the *source* of
  the cell with that ``grade_id`` is taken; its metadata, points and every other cell are
  ignored. A missing or duplicated ``grade_id`` counts as an unanswered cell.
* Test cells: the instructor's source notebook (``notebooks/MODULE``, with hidden tests) says
  what each graded cell checks; each must hold only calls ``check("exercise", kernel)`` or
  ``check("exercise", kernel, hidden=True)``, one or more (read with ``ast``, never executed; a
  cell with several scores its points only when all pass). Points come from the released notebook.
"""
from __future__ import annotations

import ast
import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

MAGIC = "%%cuda"
MAGICS = ("%%cuda", "%%triton")  # answer cells: CUDA C kernels, and Triton cells (module 12)


def _src(cell) -> str:
    s = cell.get("source", "")
    return "".join(map(str, s)) if isinstance(s, list) else str(s)


def _nbg(cell) -> dict:
    md = cell.get("metadata", {}) if isinstance(cell, dict) else {}
    m = md.get("nbgrader", {}) if isinstance(md, dict) else {}
    return m if isinstance(m, dict) else {}


def _gid(cell) -> str | None:
    """A cell's grade_id, if it is one (a submitted notebook's may be a list, a number...)."""
    gid = _nbg(cell).get("grade_id")
    return gid if isinstance(gid, str) else None


@dataclass
class TestCell:
    grade_id: str
    points: float
    exercise: str
    hidden: bool
    kernel_var: str


@dataclass
class AnswerCell:
    grade_id: str
    kernel: str  # the kernel name on the released magic line
    released_source: str


@dataclass
class Layout:
    """One released notebook of a module: its graded cells and how they are checked."""

    module: str
    name: str  # notebook file name without .ipynb (nbgrader's notebook id)
    released: dict
    answers: dict[str, AnswerCell]
    tests: list[TestCell]
    problems: list[str] = field(default_factory=list)  # test cells that cannot be graded cleanly

    @property
    def exercises(self) -> list[str]:
        return list(dict.fromkeys(t.exercise for t in self.tests))

    def answer_for(self, exercise_kernel: str) -> AnswerCell | None:
        return next((a for a in self.answers.values() if a.kernel == exercise_kernel), None)


def _parse_checks(source: str):
    """[(exercise id, kernel variable, hidden), ...] of a test cell made only of ``check(...)``
    calls (one or more), or None for anything else."""
    body = "\n".join(line for line in source.splitlines() if not line.strip().startswith("###"))
    try:
        tree = ast.parse(body)
    except SyntaxError:
        return None
    if not tree.body:
        return None
    found = []
    for stmt in tree.body:
        call = stmt.value if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) else None
        if call is None:
            return None
        name = call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, "attr", None)
        if name != "check" or len(call.args) != 2 or not isinstance(call.args[0], ast.Constant):
            return None
        hidden = False
        for kw in call.keywords:
            if kw.arg == "hidden" and isinstance(kw.value, ast.Constant):
                hidden = bool(kw.value.value)
            elif kw.arg != "quiet":
                return None
        var = call.args[1].id if isinstance(call.args[1], ast.Name) else None
        found.append((str(call.args[0].value), var, hidden))
    return found


def load_layout(root: Path, module: str, release_dir: str = "exercises", source_dir: str = "notebooks") -> list[Layout]:
    out = []
    for rel in sorted((root / release_dir / module).glob("*.ipynb")):
        released = json.loads(rel.read_text())
        src_path = root / source_dir / module / rel.name
        source = json.loads(src_path.read_text()) if src_path.exists() else released
        source_tests = {(_nbg(c).get("grade_id")): _src(c) for c in source["cells"]
                        if _nbg(c).get("grade") and not _nbg(c).get("solution")}
        answers, tests, problems = {}, [], []
        for cell in released["cells"]:
            m = _nbg(cell)
            gid = m.get("grade_id")
            if m.get("solution") and cell.get("cell_type") == "code":
                first = _src(cell).lstrip().split("\n", 1)[0]
                magic = first.split()[0] if first.split() else ""
                if magic in MAGICS:
                    words = shlex.split(first[len(magic):])
                    answers[gid] = AnswerCell(gid, words[0] if words else "", _src(cell))
            elif m.get("grade") and cell.get("cell_type") == "code":
                parsed = _parse_checks(source_tests.get(gid, _src(cell)))
                if parsed is None:
                    problems.append(f"{gid}: not only check(...) calls; left to nbgrader")
                    continue
                # A cell with several checks is several tests sharing its grade_id: it scores only
                # if every one passes (see grader.autograde's scoring).
                tests += [TestCell(gid, float(m.get("points", 0)), ex, hidden, var) for ex, var, hidden in parsed]
        out.append(Layout(module, rel.stem, released, answers, tests, problems))
    return out


# --------------------------------------------------------------------------- a submission


def split_magic(cell_source: str) -> tuple[str | None, tuple, str]:
    """(kernel name, options, body) of a ``%%cuda`` (or ``%%triton``) cell; (None, (), source) otherwise."""
    text = cell_source.lstrip()
    first, _, body = text.partition("\n")
    magic = first.split()[0] if first.split() else ""
    if magic not in MAGICS:
        return None, (), cell_source
    try:
        words = shlex.split(first[len(magic):])
    except ValueError:
        words = first[len(magic):].split()
    return (words[0] if words else None), tuple(words[1:]), body


def submitted_answers(nb: dict, layout: Layout, repairs: list | None = None) -> dict[str, str | None]:
    """``{grade_id: source}`` for the layout's answer cells (None: missing or duplicated). An
    answer cell whose nbgrader metadata is gone is found by its ``%%cuda NAME`` line, when exactly
    one such cell names that kernel; each such repair is appended to ``repairs``."""
    found: dict[str, list[str]] = {}
    unmarked: dict[str, list[str]] = {}  # kernel name -> sources of code cells without an answer's grade_id
    for cell in nb.get("cells", []):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        gid = _gid(cell)
        if gid in layout.answers:
            found.setdefault(gid, []).append(_src(cell))
        elif gid is None:
            name = split_magic(_src(cell))[0]
            if name:
                unmarked.setdefault(name, []).append(_src(cell))
    out = {}
    for gid, answer in layout.answers.items():
        v = found.get(gid, [])
        if not v and len(unmarked.get(answer.kernel, [])) == 1:
            v = unmarked[answer.kernel]
            if repairs is not None:
                repairs.append(f"answer cell {gid} found by its '{MAGIC} {answer.kernel}' line (its nbgrader "
                               "metadata was removed)")
        out[gid] = v[0] if len(v) == 1 else None
    return out


_SUSPECT = [
    (re.compile(r"\bcheck\s*=|grader\.check\s*=|checks\.check\s*=|\brun_check\s*=|setattr\s*\(\s*(grader|checks)"),
     "replaces the check() helper"),
    (re.compile(r"RawKernel\s*=|kernel\.RawKernel|class\s+\w*RawKernel|compile_kernel\s*=|\.launch\s*="),
     "replaces the kernel runner (grader.RawKernel / the emulator)"),
    (re.compile(r"solution_source|notebooks/|solutions/"), "reads the reference solution"),
    (re.compile(r"GRADER_SEED|grading_seed"), "reads or sets the grading seed"),
    (re.compile(r"ast_transformers|set_custom_exc|events\.register|input_transformers|sys\.settrace|sys\.setprofile"),
     "installs an IPython/interpreter hook"),
    (re.compile(r"subprocess|os\.system|os\.fork|Popen|nohup|daemon|multiprocessing|os\.setsid"),
     "starts processes"),
    (re.compile(r"gradebook|\.db\b|sqlite|grading/|submitted|autograded|nbgrader_config|\bopen\s*\([^)]*['\"]w"),
     "writes files (course, gradebook or submissions)"),
    (re.compile(r"signal\.(signal|SIG_IGN)"), "changes signal handling"),
]


def _points(meta: dict) -> float | None:
    try:
        return float(meta.get("points", 0) or 0)
    except (TypeError, ValueError):
        return None


def suspicious(nb: dict, layout: Layout) -> list[str]:
    """Why a notebook's own run of its tests may not reflect its kernels (read, not run)."""
    reasons = []
    released_cells = {(_nbg(c).get("grade_id")): c for c in layout.released["cells"] if _nbg(c).get("grade_id")}
    seen = set()
    for cell in nb.get("cells", []):
        if not isinstance(cell, dict):
            continue
        m, gid = _nbg(cell), _gid(cell)
        if gid in released_cells and gid not in seen:
            seen.add(gid)
            rel = released_cells[gid]
            rm = _nbg(rel)
            if rm.get("grade") and not rm.get("solution"):
                if _src(cell).strip() != _src(rel).strip():
                    reasons.append(f"test cell {gid} edited")
                if m.get("points", 0) != rm.get("points", 0) and _points(m) != float(rm.get("points", 0) or 0):
                    reasons.append(f"points of {gid} changed to {m.get('points')}")
            if rm.get("solution") and rel.get("cell_type") == "code" and split_magic(_src(rel))[0] \
                    and split_magic(_src(cell))[0] is None:
                reasons.append(f"answer cell {gid} is not a %%cuda cell")
        if cell.get("cell_type") != "code" or split_magic(_src(cell))[0] is not None:
            continue
        if gid in released_cells and _src(cell).strip() == _src(released_cells[gid]).strip():
            continue
        text = _src(cell)
        for pattern, why in _SUSPECT:
            if pattern.search(text) and why not in reasons:
                reasons.append(why)
    missing = [g for g, c in released_cells.items() if _nbg(c).get("grade") and g not in seen]
    if missing:
        reasons.append("graded cells missing: " + ", ".join(missing))
    return reasons

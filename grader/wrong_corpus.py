"""The known-wrong kernels of ``tests/wrong/<exercise_id>/``, read in one place.

A wrong kernel is stored in one of two forms:

* ``NAME.cu``: a whole kernel, first line ``// expect: TEXT``: for kernels written in another
  style than the solution;
* ``NAME.edit``: the expect line, optional ``//`` comment lines (what the mistake is), then one or
  more blocks applied to the exercise's solution (read from its instructor notebook, the
  ``// BEGIN SOLUTION`` / ``// END SOLUTION`` lines left out, as a student would hand it in)::

      // expect: subtracted instead of added
      // Subtracts instead of adding.
      @@ find
          if (i < n) c[i] = a[i] + b[i];
      @@ replace
          if (i < n) c[i] = a[i] - b[i];

  A line that is exactly ``@@ find`` or ``@@ replace`` starts a block; every other line up to the
  next marker is kernel text, taken whole (an empty replace deletes the found lines). Each find
  must stand exactly once, as whole lines, in the solution, so that editing a solution makes
  the edits it breaks fail loudly (:class:`StaleEdit`) instead of testing an old copy.

``TEXT`` must appear in the check's failure message (``tests/checks/test_wrong_kernels.py``).
``tests/wrong/to_edits.py`` turns whole kernels that are small changes of the solution into edits.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from .course import ROOT, solution_source

WRONG = ROOT / "tests" / "wrong"
EXPECT = "// expect: "
FIND, REPLACE = "@@ find", "@@ replace"
SOLUTION_MARK = re.compile(r"\s*// (BEGIN|END) SOLUTION\s*")
# Exercises that grade the same kernel as another in a different precision share its wrong kernels.
SAME_KERNEL = {"tc_flash_fwd_bf16_d64": "tc_flash_fwd_d64", "tc_flash_fwd_bf16_d128": "tc_flash_fwd_d128"}
CHECK_SEED = 2024  # the grading seed every wrong kernel is judged with (test and conversion alike)


class StaleEdit(ValueError):
    """An edit that no longer applies to its exercise's solution."""


@dataclass(frozen=True)
class Block:
    find: list[str]
    replace: list[str]


def replace_each_once(source: str, pairs, what: str) -> str:
    """``source`` with each (find, replace) applied, every find standing exactly once (the benchmarks'
    ablations and variants: a find that the solution no longer holds once is an error, never a no-op)."""
    for find, replace in pairs:
        if source.count(find) != 1:
            raise StaleEdit(f"{what}: its find text {find[:80]!r} no longer stands once in the solution")
        source = source.replace(find, replace)
    return source


def solution_base(exercise_id: str) -> str:
    """What edits apply to: the instructor's kernel without its solution-region marker lines."""
    return "\n".join(l for l in solution_source(exercise_id).split("\n") if not SOLUTION_MARK.fullmatch(l))


def parse_edit(text: str, where: str = "edit") -> tuple[str, list[str], list[Block]]:
    """``(expect, comment lines, blocks)`` of an edit file's text."""
    lines = text.removesuffix("\n").split("\n")
    if not lines[0].startswith(EXPECT):
        raise ValueError(f"{where} must start with '{EXPECT}TEXT'")
    i, comments = 1, []
    while i < len(lines) and not lines[i].startswith("@@"):
        if not lines[i].startswith("//"):
            raise ValueError(f"{where}, line {i + 1}: before the first '{FIND}', only '//' comment lines")
        comments.append(lines[i])
        i += 1
    blocks, current = [], None
    for n, line in enumerate(lines[i:], i + 1):
        if line == FIND:
            if current is not None and current[0] != REPLACE:
                raise ValueError(f"{where}, line {n}: '{FIND}' before the previous block's '{REPLACE}'")
            current = (FIND, [])
            blocks.append(Block(current[1], []))
        elif line == REPLACE:
            if current is None or current[0] != FIND:
                raise ValueError(f"{where}, line {n}: '{REPLACE}' without a '{FIND}' before it")
            current = (REPLACE, blocks[-1].replace)
        elif line.startswith("@@"):
            raise ValueError(f"{where}, line {n}: unknown marker {line!r} (only '{FIND}' and '{REPLACE}')")
        else:
            current[1].append(line)
    if not blocks:
        raise ValueError(f"{where} has no '{FIND}' block")
    if current[0] != REPLACE:
        raise ValueError(f"{where}: the last '{FIND}' has no '{REPLACE}'")
    for k, b in enumerate(blocks, 1):
        if not "".join(b.find).strip():
            raise ValueError(f"{where}: block {k} finds no text")
    return lines[0].removeprefix(EXPECT).strip(), comments, blocks


def occurrences(lines: list[str], find: list[str]) -> list[int]:
    """Where ``find`` stands as whole lines in ``lines``."""
    n = len(find)
    return [i for i in range(len(lines) - n + 1) if lines[i:i + n] == find]


def apply_edit(solution: str, blocks: list[Block], where: str, exercise_id: str) -> str:
    """The solution with every block's find replaced; each is located in the unedited solution."""
    lines = solution.split("\n")
    spans = []
    for k, b in enumerate(blocks, 1):
        found = occurrences(lines, b.find)
        if len(found) != 1:
            how = "is not in it" if not found else f"stands {len(found)} times in it"
            raise StaleEdit(f"stale wrong kernel: block {k} of {where} no longer matches the solution of "
                            f"{exercise_id} (its find text {how}): update the edit, or rerun "
                            f"tests/wrong/to_edits.py on a whole kernel")
        spans.append((found[0], found[0] + len(b.find), k, b.replace))
    spans.sort()
    for (_, end, k1, _), (start, _, k2, _) in zip(spans, spans[1:]):
        if start < end:
            raise ValueError(f"{where}: blocks {k1} and {k2} find overlapping lines of the solution of {exercise_id}")
    for start, end, _, replace in reversed(spans):
        lines[start:end] = replace
    return "\n".join(lines)


def format_edit(expect: str, comments: list[str], blocks: list[Block]) -> str:
    out = [EXPECT + expect, *comments]
    for b in blocks:
        out += [FIND, *b.find, REPLACE, *b.replace]
    return "\n".join(out) + "\n"


@dataclass(frozen=True)
class WrongKernel:
    path: Path

    @property
    def exercise(self) -> str:
        """The exercise whose solution an edit applies to (the folder's name)."""
        return self.path.parent.name

    @property
    def name(self) -> str:
        return self.path.stem

    @property
    def is_edit(self) -> bool:
        return self.path.suffix == ".edit"

    @property
    def expect(self) -> str:
        first = self.path.read_text().split("\n", 1)[0]
        if not first.startswith(EXPECT):
            raise ValueError(f"{self.path} must start with '{EXPECT}TEXT'")
        return first.removeprefix(EXPECT).strip()

    def source(self) -> str:
        """The kernel a student would hand in: the file itself, or the edited solution.
        Raises :class:`StaleEdit` when an edit's find text is no longer in the solution."""
        text = self.path.read_text()
        if not self.is_edit:
            return text
        where = f"{self.exercise}/{self.path.name}"
        _, _, blocks = parse_edit(text, where)
        return apply_edit(solution_base(self.exercise), blocks, where, self.exercise)


def wrong_kernels(exercise_id: str | None = None, root: Path = WRONG) -> list[WrongKernel]:
    """Every wrong kernel (``*.cu`` and ``*.edit``), or one exercise folder's, sorted by path."""
    paths = sorted((root / exercise_id).glob("*") if exercise_id else root.glob("*/*"))
    kernels = [WrongKernel(p) for p in paths if p.suffix in (".cu", ".edit")]
    twice = sorted(str(s) for s, n in Counter(k.path.with_suffix("") for k in kernels).items() if n > 1)
    if twice:
        raise ValueError(f"a wrong kernel both as .cu and as .edit: {', '.join(twice)}")
    return kernels


def wrong_kernel(exercise_id: str, name: str, root: Path = WRONG) -> WrongKernel:
    """One wrong kernel by folder and name, whichever form it is stored in."""
    found = [k for k in wrong_kernels(exercise_id, root) if k.name == name]
    if not found:
        raise FileNotFoundError(f"no wrong kernel {name} (.cu or .edit) in {root / exercise_id}")
    return found[0]


def graded_pairs(root: Path = WRONG) -> list[tuple[str, WrongKernel]]:
    """``(exercise, kernel)`` for every check a wrong kernel must fail: its folder's exercise,
    and the exercises of :data:`SAME_KERNEL` that grade the same kernel in another precision."""
    kernels = wrong_kernels(root=root)
    return [(k.exercise, k) for k in kernels] + [
        (ex, k) for ex, twin in SAME_KERNEL.items() for k in kernels if k.exercise == twin]

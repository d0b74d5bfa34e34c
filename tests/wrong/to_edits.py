"""Turn whole wrong kernels (``NAME.cu``) into edits of their exercise's solution (``NAME.edit``).

    .venv/bin/python tests/wrong/to_edits.py                      # every folder
    .venv/bin/python tests/wrong/to_edits.py decode_split_kv ...  # these folders only
    .venv/bin/python tests/wrong/to_edits.py --dry-run            # say what it would do

For each ``.cu`` of a folder, the solution it was copied from is looked for among the
exercise's solution now and its earlier versions in git (a copy made before the solution was
restyled differs from the current one in every restyled line): the closest one. Its diff with
the kernel is carried over to the current solution (a change that touches a line the restyle
changed is a conflict: the kernel stays whole). When the result is small (at most ``--blocks``
find/replace blocks and ``--lines`` changed lines), its edit is written, checked to rebuild the
kernel, and the kernel is judged as ``tests/checks/test_wrong_kernels.py`` judges it (its
exercise's check on the emulator must fail with the expected diagnosis, and so must the checks
of ``SAME_KERNEL``); only then does the ``.cu`` go. Comment lines the kernel adds above the
solution's first line become the edit's comment lines. Kept whole, with the reason printed:
kernels in another style (large diffs), an exercise not registered yet, an expect text that
names a line number (lines shift by the removed expect line), a kernel whose rebased version
no longer fails as expected. Rerunnable: ``.edit`` files are left as they are.
"""
from __future__ import annotations

import argparse
import difflib
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from grader.checks import REGISTRY, get_exercise, run_check  # noqa: E402
from grader.course import MAGIC  # noqa: E402
from grader.wrong_corpus import (CHECK_SEED, EXPECT, SAME_KERNEL, SOLUTION_MARK, WRONG, Block,  # noqa: E402
                                 apply_edit, format_edit, occurrences, parse_edit, solution_base)

LINE_NUMBER = re.compile(r"\bline \d+")


def strip_marks(lines: list[str]) -> list[str]:
    return [l for l in lines if not SOLUTION_MARK.fullmatch(l)]


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout


def earlier_solutions(exercise_id: str) -> list[list[str]]:
    """The exercise's kernel in every commit that touched its module's notebooks, newest first."""
    ex = get_exercise(exercise_id)
    folder = f"notebooks/{ex.module}"
    found = []
    for commit in git("log", "--format=%H", "--", folder).split():
        for path in git("ls-tree", "-r", "--name-only", commit, folder).split("\n"):
            if not path.endswith(".ipynb"):
                continue
            for cell in json.loads(git("show", f"{commit}:{path}"))["cells"]:
                first, _, body = "".join(cell["source"]).partition("\n")
                if cell["cell_type"] == "code" and first.startswith(MAGIC) and first.split()[1:2] == [ex.kernel]:
                    found.append(strip_marks(body.split("\n")))
    return found


def changes(a: list[str], b: list[str]) -> list[tuple[str, int, int, int, int]]:
    return [op for op in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes() if op[0] != "equal"]


def size(ops) -> tuple[int, int]:
    """(hunks, changed lines): a replaced line counts once, like an added or a deleted one."""
    return len(ops), sum(max(i2 - i1, j2 - j1) for _, i1, i2, j1, j2 in ops)


def rebase(base: list[str], kernel: list[str], current: list[str]) -> list[str] | None:
    """``kernel`` (``base`` changed) as the same change of ``current``; None on a conflict (a
    changed line of ``base`` that ``current`` no longer has as it was)."""
    if base == current:
        return kernel
    where = {}  # line of base -> the same line in current, for lines the two share
    for tag, i1, i2, j1, _ in difflib.SequenceMatcher(None, base, current, autojunk=False).get_opcodes():
        if tag == "equal":
            where.update({i1 + k: j1 + k for k in range(i2 - i1)})
    out, done = [], 0  # current's lines up to `done` are in out
    for _, i1, i2, j1, j2 in changes(base, kernel):
        if i2 > i1:
            if any(i not in where for i in range(i1, i2)) or where[i2 - 1] - where[i1] != i2 - 1 - i1:
                return None
            start, end = where[i1], where[i2 - 1] + 1
        elif i1 - 1 in where:
            start = end = where[i1 - 1] + 1
        elif i1 in where:
            start = end = where[i1]
        else:
            return None
        if start < done:
            return None
        out += current[done:start] + kernel[j1:j2]
        done = end
    return out + current[done:]


def blocks_between(current: list[str], kernel: list[str]) -> list[Block]:
    """Find/replace blocks that turn ``current`` into ``kernel``: each diff hunk, widened by
    context lines until its find text stands once in ``current``; hunks that come to overlap
    are merged."""
    spans = []
    for _, i1, i2, j1, j2 in changes(current, kernel):
        a, b, c, d = i1, i2, j1, j2
        up = True
        while a == b or len(occurrences(current, current[a:b])) != 1:
            if (up and a > 0) or b == len(current):
                a, c = a - 1, c - 1
            else:
                b, d = b + 1, d + 1
            up = not up
        if spans and a < spans[-1][1]:  # overlaps the previous block: one block over both
            pa, pb, pc, _ = spans.pop()
            a, c = pa, pc
            if pb > b:  # the lines past this hunk are the same in both
                b, d = pb, d + pb - b
        spans.append((a, b, c, d))
    return [Block(current[a:b], kernel[c:d]) for a, b, c, d in spans]


def judged(exercise_id: str, source: str, expect: str) -> str | None:
    """None if every check that grades the kernel fails it with ``expect``; else what went wrong."""
    for ex in [exercise_id] + [e for e, twin in SAME_KERNEL.items() if twin == exercise_id]:
        result = run_check(ex, source, include_hidden=True, backend="cpu", seed=CHECK_SEED)
        if result.passed:
            return f"passes {ex}"
        messages = "\n".join(r.message for r in result.results if not r.passed)
        if expect not in messages:
            return f"{ex} answers otherwise: {messages.splitlines()[0][:160]}"
    return None


def convert(path: Path, bases: list[list[str]], current: list[str], max_blocks: int, max_lines: int,
            verify: bool, dry_run: bool) -> str:
    """What became of one ``.cu``: 'converted ...' or 'kept: reason'."""
    text = path.read_text()
    lines = text.removesuffix("\n").split("\n")
    if not lines[0].startswith(EXPECT):
        return "kept: no expect line"
    expect = lines[0].removeprefix(EXPECT).strip()
    if LINE_NUMBER.search(expect):
        return "kept: the expect text names a line number"
    body = strip_marks(lines[1:])
    if any(l.startswith("@@") for l in body):
        return "kept: a line starts with @@ (the edit markers)"
    comments = []
    while body and body[0].startswith("//") and not current[0].startswith("//"):
        comments.append(body.pop(0))
    tried = sorted(bases, key=lambda base: size(changes(base, body)))  # stable: the current solution first on ties
    why = "kept: a conflict with every earlier solution"
    for base in tried:
        rebased = rebase(base, body, current)
        if rebased is None:
            continue
        hunks, changed = size(changes(current, rebased))
        if hunks == 0:
            return "kept: the same as the solution"
        if hunks > max_blocks or changed > max_lines:
            why = f"kept: too large for an edit ({hunks} hunks, {changed} changed lines)"
            break
        blocks = blocks_between(current, rebased)
        edit = format_edit(expect, comments, blocks)
        where = f"{path.parent.name}/{path.stem}.edit"
        assert apply_edit("\n".join(current), parse_edit(edit, where)[2], where, path.parent.name) == "\n".join(rebased)
        if verify:
            problem = judged(path.parent.name, "\n".join(rebased), expect)
            if problem:
                return f"kept: rebased onto the current solution, it {problem}"
        if not dry_run:
            path.with_suffix(".edit").write_text(edit)
            path.unlink()
        origin = "the current solution" if base == current else "an earlier solution"
        return f"converted: {len(blocks)} block(s), {changed} changed line(s), from {origin}"
    return why


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folders", nargs="*", help="exercise folders of tests/wrong (default: all)")
    ap.add_argument("--blocks", type=int, default=3, help="most find/replace blocks an edit may have (3)")
    ap.add_argument("--lines", type=int, default=12, help="most changed lines an edit may have (12)")
    ap.add_argument("--no-verify", action="store_true", help="skip judging the edited kernels on the emulator")
    ap.add_argument("--dry-run", action="store_true", help="write and delete nothing")
    a = ap.parse_args()
    get_exercise("vector_add")  # registers every exercise
    folders = a.folders or sorted(p.name for p in WRONG.iterdir() if p.is_dir())
    outcome = {}
    for folder in folders:
        paths = sorted((WRONG / folder).glob("*.cu"))
        if not paths:
            continue
        if folder not in REGISTRY:
            outcome.update({p: "kept: exercise not registered yet: rerun once it is" for p in paths})
            continue
        current = solution_base(folder).split("\n")
        bases = [current] + [b for b in earlier_solutions(folder) if b != current]
        for p in paths:
            outcome[p] = convert(p, bases, current, a.blocks, a.lines, not a.no_verify, a.dry_run)
            print(f"{p.relative_to(WRONG)}: {outcome[p]}", flush=True)
    converted = sum(o.startswith("converted") for o in outcome.values())
    print(f"\n{converted} of {len(outcome)} whole kernels {'would be ' if a.dry_run else ''}converted to edits; "
          f"{len(outcome) - converted} stay whole" + (":" if converted < len(outcome) else "."))
    reasons = [o.removeprefix("kept: ").split(" (")[0] for o in outcome.values() if o.startswith("kept")]
    for reason in sorted(set(reasons)):
        print(f"  {reasons.count(reason):3d}  {reason}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

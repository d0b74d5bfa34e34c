"""Every known-wrong kernel must fail its exercise's check with the intended diagnosis (the
solutions' side, that they pass every case, is test_correct_kernels.py). The wrong kernels are
read through grader.wrong_corpus: whole ``.cu`` files, or ``.edit`` files applied to the solution."""
import dataclasses
import re

import pytest

from grader.checks import REGISTRY, _thread_factor, get_exercise, run_check
from grader.wrong_corpus import (CHECK_SEED, Block, StaleEdit, WrongKernel, apply_edit, graded_pairs, parse_edit,
                                 solution_base, wrong_kernels)

get_exercise("vector_add")  # register every exercise
KERNELS = wrong_kernels()
CASES = graded_pairs()
EDITS = [k for k in KERNELS if k.is_edit]


@pytest.mark.parametrize("exercise, kernel", CASES, ids=[f"{ex}/{k.name}" for ex, k in CASES])
def test_wrong_kernel_is_caught_and_named(exercise, kernel):
    ex = get_exercise(exercise)
    # Cheapest first: the visible cases below 2^24 threads, then every case below it, then all of them
    # (those take seconds). A later run only where the earlier ones did not name the mistake.
    small = [c for c in ex.cases if _thread_factor(ex, c) == 1.0]
    visible = [c for c in small if not c.hidden]
    for subset in (visible, small) if len(visible) < len(small) else (small,):
        if 0 < len(subset) < len(ex.cases):
            result = run_check(dataclasses.replace(ex, cases=subset), kernel.source(), include_hidden=True,
                               backend="cpu", seed=CHECK_SEED)
            if kernel.expect in "\n".join(r.message for r in result.results if not r.passed):
                return
    result = run_check(exercise, kernel.source(), include_hidden=True, backend="cpu", seed=CHECK_SEED)
    assert not result.passed, f"{kernel.path.name} passed every case of {exercise}"
    messages = "\n".join(r.message for r in result.results if not r.passed)
    assert kernel.expect in messages, messages


@pytest.mark.parametrize("kernel", EDITS, ids=[f"{k.exercise}/{k.name}" for k in EDITS])
def test_edit_applies_to_the_current_solution(kernel):
    """Cheap, no emulator: an edit whose find text the solution lost fails here, by name."""
    source = kernel.source()
    assert source != solution_base(kernel.exercise), f"{kernel.path.name} leaves the solution as it is"


def test_a_stale_edit_says_which_block_and_exercise(tmp_path):
    folder = tmp_path / "vector_add"
    folder.mkdir()
    solution = solution_base("vector_add")
    line = next(l for l in solution.split("\n") if "c[i] =" in l)
    subtract = f"// expect: differ\n@@ find\n{line}\n@@ replace\n{line.replace('+', '-')}\n"
    (folder / "subtracts.edit").write_text(subtract)
    (folder / "gone.edit").write_text(subtract + "@@ find\n    no such line;\n@@ replace\n")
    assert WrongKernel(folder / "subtracts.edit").source() == solution.replace(line, line.replace("+", "-"))
    with pytest.raises(StaleEdit, match=re.escape("stale wrong kernel: block 2 of vector_add/gone.edit no longer "
                                                  "matches the solution of vector_add (its find text is not in it)")):
        WrongKernel(folder / "gone.edit").source()


def test_a_find_must_stand_once_and_blocks_must_not_overlap():
    solution = "a\nb\na\nc"
    assert apply_edit(solution, [Block(["b", "a"], ["B"]), Block(["c"], [])], "x.edit", "ex") == "a\nB"
    with pytest.raises(StaleEdit, match="block 1 of x.edit no longer matches the solution of ex .* stands 2 times"):
        apply_edit(solution, [Block(["a"], ["A"])], "x.edit", "ex")
    with pytest.raises(ValueError, match="blocks 1 and 2 find overlapping lines"):
        apply_edit(solution, [Block(["b", "a"], []), Block(["a", "c"], [])], "x.edit", "ex")


@pytest.mark.parametrize("text, error", [
    ("@@ find\nx\n@@ replace\n", "must start with '// expect: TEXT'"),
    ("// expect: differ\nnot a comment\n@@ find\nx\n@@ replace\n", "only '//' comment lines"),
    ("// expect: differ\n@@ find\nx\n", "the last '@@ find' has no '@@ replace'"),
    ("// expect: differ\n@@ replace\nx\n", "'@@ replace' without a '@@ find'"),
    ("// expect: differ\n@@ find\nx\n@@ find\ny\n@@ replace\n", "'@@ find' before the previous block's '@@ replace'"),
    ("// expect: differ\n@@ find\n\n@@ replace\nx\n", "block 1 finds no text"),
    ("// expect: differ\n@@ find\nx\n@@ replace\n@@ delete\n", "unknown marker"),
    ("// expect: differ\n// only a comment\n", "no '@@ find' block"),
])
def test_a_malformed_edit_is_refused(text, error):
    with pytest.raises(ValueError, match=error):
        parse_edit(text, "x.edit")


def test_one_kernel_is_either_whole_or_an_edit(tmp_path):
    (tmp_path / "vector_add").mkdir()
    for suffix in (".cu", ".edit"):
        (tmp_path / "vector_add" / f"same{suffix}").write_text("// expect: differ\n")
    with pytest.raises(ValueError, match="both as .cu and as .edit"):
        wrong_kernels(root=tmp_path)


def test_every_wrong_kernel_folder_names_an_exercise():
    assert {k.exercise for k in KERNELS} <= set(REGISTRY)


# Expectations that only say *that* something is wrong, not which mistake: a wrong kernel whose
# expected diagnosis is one of these counts as caught but not named.
GENERIC = ("differ", "NaN computed by the kernel", "are NaN computed by the kernel", "never written",
           "were never written")


def test_most_wrong_kernels_are_named():
    """Of the wrong corpus, the share whose expected diagnosis names the mistake (a declared
    Mistake, a fault with its class, a race, a write into an input, an infinity) rather than a
    generic 'differ': at least 85%. (Each is checked against the real message above.)"""
    named = [k for k in KERNELS if k.expect not in GENERIC]
    share = len(named) / len(KERNELS)
    print(f"\n{len(named)} of {len(KERNELS)} wrong kernels ({share:.0%}) expect a diagnosis that names the mistake")
    assert share >= 0.85

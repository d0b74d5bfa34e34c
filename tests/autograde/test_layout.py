"""What the clean regrade reads from the notebooks: every test cell of every module is gradable
by it (none left to nbgrader), and a cell with several checks scores only when all pass."""
import pytest

from grader.autograde import CellScore, _per_cell
from grader.autograde.notebook import _parse_checks, load_layout
from grader.course import ROOT, modules


@pytest.mark.parametrize("module", modules())
def test_every_test_cell_is_graded_by_the_clean_regrade(module):
    for lay in load_layout(ROOT, module):
        assert lay.tests, f"{module}: no test cell found"
        assert not lay.problems, f"{module}: " + "; ".join(lay.problems)


def test_a_cell_may_hold_several_checks():
    src = '# a comment\n### BEGIN HIDDEN TESTS\ncheck("a_d64", k, hidden=True)\ncheck("a_d128", k, hidden=True)\n### END HIDDEN TESTS'
    assert _parse_checks(src) == [("a_d64", "k", True), ("a_d128", "k", True)]
    for bad in ('check("a", k)\nx = 1', 'for e in ("a", "b"):\n    check(e, k)', 'check("a", k, other=1)', ""):
        assert _parse_checks(bad) is None, bad


def test_a_cell_with_several_checks_scores_only_when_all_pass():
    merged = _per_cell([CellScore("c", 2.0, 2.0), CellScore("c", 2.0, 0.0, why="failed"), CellScore("d", 1.0, 1.0)])
    assert [(c.grade_id, c.score, c.why) for c in merged] == [("c", 0.0, "failed"), ("d", 1.0, "")]

"""Every module's notebooks, as nbgrader sees them.

1. The instructor notebook runs top to bottom and passes all its tests, hidden ones included.
2. The committed exercises/ and solutions/ equal a fresh regeneration (`python -m grader release`).

That the released notebook fails every test, hidden ones included (what `nbgrader autograde` runs
for a student who hands it in untouched, so a blank submission scores zero), is checked where a
student gets it: from the student bundle, with the packaged grader (test_student_bundle.py).
"""
import pytest
from nbgrader.validator import Validator
from traitlets.config import Config

from grader import classroom
from grader.course import ROOT, modules, notebook_of

MODULES = modules()


def _gid(cell) -> str:
    return cell.metadata.nbgrader["grade_id"]


class _Validator(Validator):
    """nbgrader's Validator, keeping the executed notebook for a closer look."""

    executed = None

    def _preprocess(self, nb):
        self.executed = super()._preprocess(nb)
        return self.executed


def _validator(**kw) -> _Validator:
    c = Config()
    c.Execute.timeout = 600  # as in nbgrader_config.py: a wall-clock cap far above the work
    for key, value in kw.items():
        setattr(c.Validator, key, value)
    return _Validator(config=c)


def _brief(results: dict) -> str:
    out = []
    for kind, cells in results.items():
        for cell in cells:
            out.append(f"[{kind}] {cell['source'][:200]}\n{cell.get('raw_error', '')[-1500:]}")
    return "\n\n".join(out)


@pytest.mark.parametrize("module", MODULES)
def test_instructor_notebook_passes_all_its_tests(module):
    results = _validator().validate(str(notebook_of(module)))
    assert results == {}, _brief(results)


def test_exercises_and_solutions_are_up_to_date():
    assert classroom.stale(ROOT) == [], "run `python -m grader release` and commit exercises/ and solutions/"

"""Every module's notebooks, as nbgrader sees them.

1. The instructor notebook runs top to bottom and passes all its tests, hidden ones included.
2. The released notebook fails every test, hidden ones included: what `nbgrader autograde`
   runs for a student who hands it in untouched (hidden tests restored from the source, as
   autograde does), so a blank submission scores zero.
3. The committed exercises/ and solutions/ equal a fresh regeneration (`python -m grader release`).
"""
import nbformat
import pytest
from nbgrader import utils
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
    c.Execute.timeout = 120  # as in nbgrader_config.py: first-call compilation counts
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


@pytest.mark.parametrize("module", MODULES)
def test_released_notebook_fails_every_test(module, tmp_path):
    released = notebook_of(module, folder=classroom.RELEASE)
    nb = nbformat.read(released, as_version=4)
    source = {_gid(c): c for c in nbformat.read(notebook_of(module), as_version=4).cells if utils.is_grade(c)}
    grade_cells = [c for c in nb.cells if utils.is_grade(c) and c.cell_type == "code"]
    assert grade_cells, f"{released} has no graded test cells"
    for cell in grade_cells:
        cell.source = source[_gid(cell)].source  # hidden tests back in
        cell.metadata.nbgrader["checksum"] = utils.compute_checksum(cell)
    path = tmp_path / released.name
    nbformat.write(nb, path)
    validator = _validator(invert=True)
    results = validator.validate(str(path))
    assert results == {}, "these tests pass on the released notebook:\n" + _brief(results)
    # ...and they fail because of the stubs, not because the notebook itself is broken: the
    # locked cells that are not tests (imports, setup) run cleanly.
    for cell in validator.executed.cells:
        if utils.is_locked(cell) and not utils.is_grade(cell) and cell.cell_type == "code":
            errors = [o for o in cell.outputs if o.output_type == "error"]
            assert not errors, f"locked cell fails in the released notebook:\n{cell.source}\n{errors[0].ename}: {errors[0].evalue}"


def test_exercises_and_solutions_are_up_to_date():
    assert classroom.stale(ROOT) == [], "run `python -m grader release` and commit exercises/ and solutions/"

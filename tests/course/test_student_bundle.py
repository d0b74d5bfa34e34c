"""The student release stands alone (`python -m grader release --student DIR`).

1. The bundle holds exercises/, the readings with their figures, the measured plots and a README
   with the install instructions, and nothing private: no notebooks/, solutions/, tests/ (nor
   tests/wrong), gradebook or nbgrader config, and no solution or hidden-test text anywhere.
2. No released notebook reaches into the course repository's private folders (notebooks/,
   solutions/, tests/) or reads kernels out of instructor notebooks.
3. Every released notebook runs from the bundle with `grader` imported from the package as a
   wheel would install it (a copy of the package with its declared package data, outside the
   repository), and fails its tests as a stub does (hidden tests put back, as autograde does).
4. `python -m grader start DIR` makes a working copy and never overwrites a student's files.
"""
from __future__ import annotations

import fnmatch
import re
import shutil
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell
from nbgrader import utils

from grader import student
from grader.course import ROOT, modules, notebook_of

from test_course_notebooks import _brief, _gid, _validator

MODULES = [m for m in modules() if (ROOT / "exercises" / m).is_dir()]

# What a released notebook must never contain: reading instructor notebooks or solutions.
_REACH = re.compile(r"notebook_of|solution_source|cuda_cells|(?<![\w.])(?:\.\./)*(?:notebooks|solutions|tests)/")


def _package_copy(dest: Path) -> Path:
    """The `grader` package as its wheel holds it: every module plus the package data that
    pyproject.toml declares (so a data file the package needs but does not declare is missed
    here as it would be in a real install)."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    data = meta["tool"]["setuptools"]["package-data"]["grader"]
    src = ROOT / "grader"
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src).as_posix()
        if not path.is_file() or "__pycache__" in rel:
            continue
        if rel.endswith(".py") or any(fnmatch.fnmatch(rel, pattern) for pattern in data):
            target = dest / "grader" / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
    return dest


@pytest.fixture(scope="session")
def bundle(tmp_path_factory):
    return student.student_bundle(tmp_path_factory.mktemp("student") / "bundle", quiet=True)


@pytest.fixture(scope="session")
def site(tmp_path_factory):
    return _package_copy(tmp_path_factory.mktemp("site"))


def _files(folder: Path):
    return [p for p in folder.rglob("*") if p.is_file()]


def test_bundle_holds_the_release_and_the_readings(bundle):
    for m in MODULES:
        assert list((bundle / "exercises" / m).glob("*.ipynb")), m
        if (ROOT / "modules" / m / "README.md").exists():
            assert (bundle / "modules" / m / "README.md").exists(), m
    readme = (bundle / "README.md").read_text()
    assert "pip install" in readme and "apt-get install" in readme and "grader doctor" in readme
    assert "python -m grader lab ." in readme


def test_bundle_holds_nothing_private(bundle):
    for private in ("notebooks", "solutions", "tests", "grading", "nbgrader_config.py"):
        assert not (bundle / private).exists(), private
    assert not [p for p in bundle.rglob("wrong") if p.is_dir()]
    for path in _files(bundle):
        if path.suffix in (".ipynb", ".md", ".cu", ".py"):
            text = path.read_text()
            for mark in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS"):
                assert mark not in text, f"{path.relative_to(bundle)} holds {mark!r}"


def test_every_local_link_of_the_bundle_resolves(bundle):
    """Every link and image of a released notebook that works in the repository works in the bundle."""
    broken = []
    for path in _files(bundle):
        if path.suffix == ".ipynb":
            cells = nbformat.read(path, as_version=4).cells
            texts = [c.source for c in cells if c.cell_type == "markdown"]
        elif path.suffix == ".md":
            texts = [path.read_text()]
        else:
            continue
        for text in texts:
            for target in re.findall(r"\]\(([^)\s]+)\)", text):
                if re.match(r"[a-z]+:|#", target):
                    continue
                rel = path.relative_to(bundle)
                target = target.split("#")[0]
                # Broken here but fine from the repository's copy: the bundle left it out.
                # (A reading may point at a repository file students do not get; notebooks must not.)
                if (path.suffix == ".ipynb" and not (path.parent / target).exists()
                        and (ROOT / rel).parent.joinpath(target).exists()):
                    broken.append(f"{rel} -> {target}")
    assert not broken, "\n".join(broken)


@pytest.mark.parametrize("module", MODULES)
def test_released_notebook_does_not_reach_into_the_repository(module, bundle):
    path = next((bundle / "exercises" / module).glob("*.ipynb"))
    found = []
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type == "code":
            found += [m.group(0) for m in _REACH.finditer(cell.source)]
    assert not found, f"{path.name} reads instructor files: {sorted(set(found))}"


@pytest.mark.parametrize("module", MODULES)
def test_released_notebook_runs_from_the_bundle_as_a_stub(module, bundle, site, monkeypatch):
    released = next((bundle / "exercises" / module).glob("*.ipynb"))
    nb = nbformat.read(released, as_version=4)
    # The harness (not the notebook) puts the hidden tests back, as nbgrader autograde does.
    source = {_gid(c): c for c in nbformat.read(notebook_of(module), as_version=4).cells if utils.is_grade(c)}
    grade_cells = [c for c in nb.cells if utils.is_grade(c) and c.cell_type == "code"]
    assert grade_cells, f"{released} has no graded test cells"
    for cell in grade_cells:
        cell.source = source[_gid(cell)].source
        cell.metadata.nbgrader["checksum"] = utils.compute_checksum(cell)
    nb.cells.append(new_code_cell("import grader\nprint('grader from', grader.__file__)"))
    path = released.with_name("run_" + released.name)
    nbformat.write(nb, path)
    monkeypatch.setenv("PYTHONPATH", str(site))  # the kernel imports the package copy
    monkeypatch.chdir(bundle)
    validator = _validator(invert=True)
    try:
        results = validator.validate(str(path))
    finally:
        path.unlink()
    assert results == {}, "these tests pass on the released notebook:\n" + _brief(results)
    executed = validator.executed.cells
    where = "".join(o.get("text", "") for o in executed[-1].outputs if o.output_type == "stream")
    assert f"grader from {site}" in where, f"the notebook did not import the packaged grader: {where!r}"
    reaching = []
    for cell in executed:
        if cell.cell_type != "code":
            continue
        for err in (o for o in cell.outputs if o.output_type == "error"):
            text = f"{err.ename}: {err.evalue}"
            if utils.is_locked(cell) and not utils.is_grade(cell):
                pytest.fail(f"locked cell fails in the released notebook:\n{cell.source}\n{text}")
            if re.search(r"/(notebooks|solutions|tests)/|expected one notebook", text):
                reaching.append(f"{cell.source[:120]}...\n  {text}")
    assert not reaching, "cells fail reaching for instructor files:\n" + "\n".join(reaching)


def test_start_makes_a_working_copy_and_keeps_the_students_files(tmp_path):
    work = tmp_path / "work"
    first = student.start(work, quiet=True)
    assert first["added"] and not first["kept"]
    nb = next((work / "exercises" / MODULES[0]).glob("*.ipynb"))
    nb.write_text(nb.read_text().replace("YOUR CODE HERE", "my own attempt", 1))
    (work / "exercises" / MODULES[-1]).rename(tmp_path / "moved")  # as if a module were new
    again = student.start(work, quiet=True)
    assert "my own attempt" in nb.read_text()  # never overwritten
    assert any(a.startswith(f"exercises/{MODULES[-1]}/") for a in again["added"])
    assert nb.relative_to(work).as_posix() in again["kept"]


def test_start_and_release_student_from_the_command_line(tmp_path):
    import subprocess

    out = subprocess.run([sys.executable, "-m", "grader", "release", "--student", str(tmp_path / "b")],
                         capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "b" / "exercises").is_dir()
    again = subprocess.run([sys.executable, "-m", "grader", "release", "--student", str(tmp_path / "b")],
                           capture_output=True, text=True, cwd=tmp_path)
    assert again.returncode == 2 and "not empty" in again.stderr
    out = subprocess.run([sys.executable, "-m", "grader", "start", str(tmp_path / "w")],
                         capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0 and "git pull never touches it" in out.stdout, out.stderr


def test_lab_hides_the_instructors_nbgrader_parts():
    """`grader lab` runs JupyterLab with grader/student_jupyter first on JUPYTER_CONFIG_PATH: the
    page config switches the instructor's front-end plugins off and the server config their
    server extensions (Formgrader answers 404), while Validate and the assignment list stay."""
    import json
    import subprocess

    env = student.lab_environment({"PATH": "/usr/bin"})
    code = ("from jupyterlab_server.config import get_static_page_config; import json; "
            "print(json.dumps(get_static_page_config(level='all')))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    disabled = json.loads(out.stdout)["disabledExtensions"]
    assert {"@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment", "@jupyter/nbgrader:course-list",
            "@jupyter/nbgrader:menu"} <= {k for k, v in disabled.items() if v}
    assert not disabled.get("@jupyter/nbgrader:validate-assignment")
    server = json.loads((student.STUDENT_JUPYTER / "jupyter_server_config.json").read_text())
    extensions = server["ServerApp"]["jpserver_extensions"]
    assert extensions == {"nbgrader.server_extensions.formgrader": False, "nbgrader.server_extensions.course_list": False}
    for module in extensions:  # names that exist, so the switch is not a silent no-op
        __import__(module)


def test_lab_refuses_a_missing_working_copy(tmp_path):
    with pytest.raises(ValueError, match="grader start"):
        student.lab(tmp_path / "nowhere")

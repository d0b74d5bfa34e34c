"""Feedback pages render their formulas offline (grader/feedback_mathjax.py).

A small course (one notebook with inline and display math from module 01's text, one graded
cell) goes through nbgrader's own ``generate_assignment``, ``autograde`` and
``generate_feedback`` with the repository's ``nbgrader_config.py``. Then:

* the page loads MathJax by a relative URL that resolves to files on disk beside the page
  (``mathjax/``: MathJax.js, its configuration, the STIX-Web fonts), hard links to one copy
  in ``grading/feedback/.mathjax-<version>/`` (so a class costs one copy of disk);
* a student's module folder copied alone still holds everything the page loads;
* ``GRADER_MATHJAX_URL`` makes the page load MathJax from that URL and copies nothing;
* in Chromium, with every request that is not a local file refused: the copied folder's page
  typesets its formulas (MathJax's output elements, no TeX source left) and asked for nothing
  on the network; the page copied alone, without its folder, falls back to the CDN.
"""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from urllib.parse import urlsplit

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell

from grader import classroom
from grader.course import ROOT
from grader.feedback_mathjax import FOLDER, mathjax_files, mathjax_source
from nbgrader_cells import adding_notebook, nbgrader_meta

MODULE = "formulas"
# Module 01's notation: what a feedback page of the course really shows.
INLINE = r"$P_{ij} = e^{S_{ij} - m_i} / \ell_i$"
DISPLAY = r"$$\ell_i = \sum_j e^{S_{ij} - m_i}, \qquad O = PV = \frac{1}{\ell} e^{S - m} V$$"
FORMULAS = 2
OTHER_URL = "https://mathjax.example.invalid/MathJax.js?config=TeX-AMS_CHTML"

pytestmark = pytest.mark.skipif(mathjax_source() is None,
                                reason="jupyter-server-mathjax is not installed (pip install -e .)")


def _notebook():
    return adding_notebook(
        new_markdown_cell(f"# Formulas\n\nThe softmax of a row: {INLINE}, with\n\n{DISPLAY}", id="intro"),
        new_code_cell("assert add(1, 2) == 3", metadata=nbgrader_meta("add_visible", grade=True, locked=True, points=1),
                      id="visible"),
    )


@pytest.fixture(scope="session")
def course(tmp_path_factory):
    course = tmp_path_factory.mktemp("mathjax-course")
    shutil.copyfile(ROOT / classroom.CONFIG, course / classroom.CONFIG)
    (course / classroom.SOURCE / MODULE).mkdir(parents=True)
    nbformat.write(_notebook(), course / classroom.SOURCE / MODULE / f"{MODULE}.ipynb")
    classroom.nbgrader(["generate_assignment", MODULE], course)
    released = classroom.read_nb(course / classroom.RELEASE / MODULE / f"{MODULE}.ipynb")
    for student in ("ada", "bob"):
        classroom.submit(course, student, MODULE, classroom.fill_answers(released, {"add": "def add(a, b):\n    return a + b"}),
                         f"{MODULE}.ipynb")
    classroom.nbgrader(["autograde", MODULE], course)
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("GRADER_MATHJAX_URL", raising=False)
        classroom.nbgrader(["generate_feedback", MODULE, "--student", "ada"], course)
        # Again, as a regrade does: the folder is rewritten, the course's copy reused.
        classroom.nbgrader(["generate_feedback", MODULE, "--student", "ada", "--force"], course)
        mp.setenv("GRADER_MATHJAX_URL", OTHER_URL)
        classroom.nbgrader(["generate_feedback", MODULE, "--student", "bob"], course)
    return course


def _page(course: Path, student: str) -> Path:
    return course / classroom.FEEDBACK / student / MODULE / f"{MODULE}.html"


def _loader(page: Path) -> str:
    """The src of the script that loads MathJax."""
    srcs = re.findall(r'<script src="([^"]*MathJax[^"]*)"', page.read_text())
    assert len(srcs) == 1, f"expected one MathJax loader in {page.name}, found {srcs}"
    return srcs[0]


def _needed(folder: Path) -> list[Path]:
    return [folder / "MathJax.js", folder / "config" / "TeX-AMS-MML_HTMLorMML-full.js", folder / "config" / "Safe.js",
            folder / "jax" / "output" / "HTML-CSS" / "fonts" / "STIX-Web" / "fontdata.js",
            folder / "fonts" / "HTML-CSS" / "STIX-Web" / "woff" / "STIXMathJax_Main-Regular.woff"]


def test_page_loads_the_mathjax_beside_it(course):
    page = _page(course, "ada")
    src = _loader(page)
    assert not urlsplit(src).scheme and not src.startswith("/"), f"not a relative URL: {src}"
    assert src.startswith(f"{FOLDER}/MathJax.js?config=")
    target = page.parent / urlsplit(src).path
    for f in [target, *_needed(target.parent)]:
        assert f.is_file(), f"the page's MathJax needs {f.relative_to(course)}, which is missing"
    # Hard links to one copy per course, not 2 MB per student and module.
    cache = next((course / classroom.FEEDBACK).glob(".mathjax-*"))
    assert os.path.samefile(target, cache / "MathJax.js")
    size = sum(p.stat().st_size for p in target.parent.rglob("*") if p.is_file())
    assert size < 4_000_000, f"the MathJax copy is {size} bytes"


def test_a_module_folder_handed_over_alone_carries_its_mathjax(course, tmp_path):
    alone = tmp_path / "ada-formulas"
    shutil.copytree(_page(course, "ada").parent, alone)
    target = alone / urlsplit(_loader(alone / f"{MODULE}.html")).path
    for f in [target, *_needed(target.parent)]:
        assert f.is_file(), f"{f.relative_to(alone)} did not travel with the folder"
    travelled = tuple(sorted(p.relative_to(target.parent).as_posix() for p in target.parent.rglob("*") if p.is_file()))
    assert travelled == mathjax_files(mathjax_source())


def test_grader_mathjax_url_is_used_and_nothing_copied(course):
    page = _page(course, "bob")
    assert _loader(page) == OTHER_URL
    assert not (page.parent / FOLDER).exists()


def _open_offline(page, html: Path) -> list[str]:
    """Open a file:// page with every other request refused; returns the URLs it asks for."""
    asked = []
    page.on("request", lambda r: asked.append(r.url))
    page.context.route(re.compile(r"^(?!file:)"), lambda route: route.abort("internetdisconnected"))
    page.goto(html.as_uri())
    return asked


def test_formulas_render_offline_in_chromium(course, page, tmp_path):
    alone = tmp_path / "ada-formulas"
    shutil.copytree(_page(course, "ada").parent, alone)
    failed = []
    page.on("requestfailed", lambda r: failed.append(f"{r.url}: {r.failure}"))
    asked = _open_offline(page, alone / f"{MODULE}.html")
    page.wait_for_function(
        "n => window.MathJax && MathJax.Hub && MathJax.Hub.queue && MathJax.Hub.queue.pending === 0"
        " && document.querySelectorAll('span.MathJax').length >= n", arg=FORMULAS, timeout=60_000)
    assert page.evaluate("MathJax.version").startswith("2.7")
    assert page.evaluate("MathJax.OutputJax['HTML-CSS'].fontInUse") == "STIX-Web"
    assert page.locator("span.MathJax").count() == FORMULAS
    assert page.locator(".MathJax_Display").count() == 1  # the $$ ... $$ formula
    text = page.locator("body").inner_text()
    assert "\\frac" not in text and "\\ell" not in text and "$" not in text, "TeX source left on the page"
    # MathJax's HTML-CSS output declares a blank font at about:blank to detect web fonts: no network.
    files = [u for u in asked if u != "about:blank"]
    remote = [u for u in files if not u.startswith("file:")]
    assert not remote, f"the page asked the network for {remote}"
    assert any(urlsplit(u).path.endswith(".woff") for u in files), "MathJax asked for no web font"
    stix = page.evaluate("[...document.fonts].filter(f => f.family.startsWith('STIXMathJax')).map(f => f.status)")
    assert stix and set(stix) == {"loaded"}, f"MathJax's STIX-Web fonts from the copy: {stix}"
    assert all(u.startswith(alone.as_uri()) for u in files), f"loaded from outside the folder: {files}"
    failed = [f for f in failed if not f.startswith("about:blank")]
    assert not failed, f"requests failed: {failed}"


def test_a_page_alone_falls_back_to_the_cdn(course, page, tmp_path):
    alone = tmp_path / "only-the-page"
    alone.mkdir()
    shutil.copyfile(_page(course, "ada"), alone / f"{MODULE}.html")
    with page.expect_request(re.compile(r"^https://cdnjs\.cloudflare\.com/.*mathjax", re.I)) as cdn:
        _open_offline(page, alone / f"{MODULE}.html")
    assert "latest.js" in cdn.value.url
    assert page.locator("span.MathJax").count() == 0  # offline and alone: the TeX stays
    assert "\\frac" in page.locator("body").inner_text()

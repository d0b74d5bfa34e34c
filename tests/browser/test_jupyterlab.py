"""The course in a real JupyterLab, driven by headless Chromium (Playwright), as people use it.

* A student, from a fresh setup: ``python -m grader start DIR`` and ``python -m grader lab DIR``
  (the student Jupyter config: no Nbgrader menu, Validate stays), opens module 00, runs all
  cells, sees the stub's check fail in the page (``0/5 cases passed``, ``CheckFailed``), pastes
  the solution's ``vector_add`` kernel into the ``%%cuda`` cell, runs it and its check cell, and
  sees ``5/5 cases passed``.
* An instructor, on a course set up as ``python -m grader demo`` does it (the repository's
  ``nbgrader_config.py``, module 00 released with ``nbgrader generate_assignment``, one
  student's full solutions in ``grading/submitted/``), starts ``jupyter lab`` in the course,
  opens Formgrader from the Nbgrader menu, sees the module and its one submission, clicks
  Autograde and sees ``graded`` and ``6 / 6``, clicks Generate Feedback and opens the page it
  wrote, which shows the score.

Every step waits on what the page shows (no sleeps). The servers run on free localhost ports
with a token and a temporary HOME and are always stopped; a failure prints a screenshot path,
the browser console and the end of the server log (conftest.py). Skipped, with the reason,
where Chromium or Playwright cannot be had.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from grader import classroom
from grader.course import ROOT

pytest.importorskip("playwright", reason="the Python package playwright is not installed (pip install -e '.[dev]', "
                    "or bash .ci/setup dev)")
from playwright.sync_api import expect  # noqa: E402

MODULE = "00_launching_kernels"
NOTEBOOK = "launching_kernels.ipynb"
KERNEL_CELL = "%%cuda vector_add"
CHECK_CELL = 'check("vector_add", vector_add)'
SLOW = 120_000  # ms: a kernel's first compile, a cold kernel and a notebook run on 2 busy cores


def _env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER")}


def solution_kernel() -> str:
    """The solution's vector_add cell as a student would write it (without nbgrader's markers)."""
    nb = classroom.read_nb(ROOT / "solutions" / MODULE / NOTEBOOK)
    src = classroom.answer_cells(nb)["vector_add_kernel"]
    return "\n".join(line for line in src.split("\n") if "BEGIN SOLUTION" not in line and "END SOLUTION" not in line)


def code_cell(page, text: str):
    """The one code cell of the open notebook whose source holds ``text``."""
    return page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell").filter(
        has=page.locator(".jp-InputArea", has_text=text))


def menu(page, *path: str) -> None:
    """Click through JupyterLab's menu bar: menu(page, "Run", "Run All Cells")."""
    for name in path:
        page.get_by_role("menuitem", name=name, exact=True).click()


def test_student_runs_module_00_from_a_fresh_setup(jupyter, page, tmp_path):
    work, home = tmp_path / "work", tmp_path / "student-lab-home"  # the lab server's HOME too
    home.mkdir()
    started = subprocess.run([sys.executable, "-m", "grader", "start", str(work)], cwd=ROOT,
                             capture_output=True, text=True, env={**_env(), "HOME": str(home)})
    assert started.returncode == 0, started.stdout + started.stderr
    assert (work / "exercises" / MODULE / NOTEBOOK).is_file()

    lab = jupyter([sys.executable, "-m", "grader", "lab", str(work)], cwd=ROOT, name="student-lab")
    page.goto(lab.url(f"lab/tree/exercises/{MODULE}/{NOTEBOOK}"))
    toolbar = page.locator(".jp-NotebookPanel-toolbar")
    expect(toolbar.locator('[data-jp-item-name="kernelName"]')).to_contain_text("Python 3", timeout=SLOW)
    # The student configuration: Validate stays, the instructor's Nbgrader menu is gone.
    expect(toolbar.get_by_text("Validate", exact=True)).to_be_visible()
    expect(page.get_by_role("menuitem", name="Run", exact=True)).to_be_visible()
    expect(page.get_by_role("menuitem", name="Nbgrader", exact=True)).to_have_count(0)

    # Run All: the stub's check fails, and the page says why (Run All stops at that cell).
    menu(page, "Run", "Run All Cells")
    check_out = code_cell(page, CHECK_CELL).locator(".jp-OutputArea")
    expect(check_out).to_contain_text("CheckFailed", timeout=SLOW)
    expect(check_out).to_contain_text("vector_add: 0/5 cases passed")
    expect(check_out).to_contain_text("were never written")
    # The cells Run All queued after the check are aborted one by one (prompt [*] to [ ]); ipykernel
    # stops aborting only after the last of them, so a cell run before that would be aborted too.
    queued = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-InputPrompt", has_text="[*]")
    expect(queued).to_have_count(0, timeout=SLOW)

    # Paste the solution's kernel into the %%cuda cell, run it, then run the check again.
    kernel = solution_kernel()
    editor = code_cell(page, KERNEL_CELL).locator(".cm-content")
    editor.click()
    page.keyboard.press("ControlOrMeta+a")
    page.keyboard.insert_text(kernel)
    expect(editor).to_have_text(kernel, use_inner_text=True)
    # Wait for each run to finish: a check queued behind a kernel cell that fails is aborted by
    # ipykernel and leaves an empty output, so the kernel cell's own result must be seen first.
    prompt = code_cell(page, KERNEL_CELL).locator(".jp-InputPrompt")
    before = prompt.inner_text()
    page.keyboard.press("ControlOrMeta+Enter")  # run the cell, stay on it
    expect(prompt).not_to_have_text(before, timeout=SLOW)
    expect(prompt).to_have_text(re.compile(r"\[\d+\]"), timeout=SLOW)
    expect(code_cell(page, KERNEL_CELL).locator(".jp-OutputArea")).not_to_contain_text("Error")
    code_cell(page, CHECK_CELL).locator(".cm-content").click()
    page.keyboard.press("ControlOrMeta+Enter")
    expect(check_out).to_contain_text("vector_add: 5/5 cases passed", timeout=SLOW)
    expect(check_out).not_to_contain_text("CheckFailed")
    expect(check_out).not_to_contain_text("[FAIL]")


def test_instructor_autogrades_a_submission_in_formgrader(jupyter, page, tmp_path):
    # The course as `python -m grader demo` sets it up, for one module and one student.
    course = classroom.make_course(ROOT, tmp_path / "course", [MODULE])
    classroom.nbgrader(["generate_assignment", MODULE], course)
    released = classroom.read_nb(course / classroom.RELEASE / MODULE / NOTEBOOK)
    answers = classroom.answer_cells(classroom.read_nb(ROOT / classroom.SOLUTION / MODULE / NOTEBOOK))
    classroom.submit(course, "ada", MODULE, classroom.fill_answers(released, answers), NOTEBOOK)

    lab = jupyter([str(Path(sys.executable).parent / "jupyter"), "lab"], cwd=course, name="instructor-lab")
    page.goto(lab.url("lab"))
    menu(page, "Nbgrader", "Formgrader")
    fg = page.frame_locator('iframe[src*="formgrader"]')

    # Manage Assignments: the module, still a draft, with one submission.
    row = fg.locator("tr", has=fg.locator("td.name", has_text=MODULE))
    expect(row.locator("td.status")).to_have_text("draft", timeout=SLOW)
    expect(row.locator("td.num-submissions")).to_have_text("1")
    row.locator("td.num-submissions a").click()

    # Manage Submissions: ada needs autograding; autograde her through the button.
    ada = fg.locator("tr", has=fg.locator("td.student-id", has_text=re.compile(r"^ada$")))
    expect(ada.locator("td.status")).to_have_text("needs autograding", timeout=SLOW)
    modal = fg.locator("#success-modal")
    ada.locator("td.autograde a").click()
    expect(modal).to_contain_text(f"Successfully autograded '{MODULE}' for student 'ada'", timeout=SLOW)
    modal.get_by_role("button", name="OK").click()
    expect(modal).to_be_hidden()
    expect(ada.locator("td.status")).to_have_text("graded")
    expect(ada.locator("td.score")).to_have_text("6 / 6")

    # Generate Feedback, then read the page it wrote (with the course's offline MathJax beside it).
    ada.locator("td.generate-feedback a").click()
    expect(modal).to_contain_text(f"Successfully generated feedback for '{MODULE}' for student 'ada'", timeout=SLOW)
    modal.get_by_role("button", name="OK").click()
    feedback = course / classroom.FEEDBACK / "ada" / MODULE
    assert (feedback / "launching_kernels.html").is_file()
    assert (feedback / "mathjax" / "MathJax.js").is_file()
    page.goto((feedback / "launching_kernels.html").as_uri())
    expect(page.locator("body")).to_contain_text("launching_kernels (Score: 6.0 / 6.0)")

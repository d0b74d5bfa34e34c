"""nbgrader preprocessors for a course whose answers are ``%%cuda`` cells.

Wired in by the repository's ``nbgrader_config.py``:

* :class:`ClearSolutionsCuda` replaces nbgrader's ``ClearSolutions`` in ``generate_assignment``.
  A ``%%cuda`` cell loses the lines between ``// BEGIN SOLUTION`` and ``// END SOLUTION`` like a
  Python cell does, but gets a CUDA stub (``// YOUR CODE HERE``, indented like the BEGIN line)
  instead of Python's ``raise NotImplementedError()``; everything the author left outside the
  region (the magic line, the signature, hints in comments) stays. Python cells keep nbgrader's
  stock stub.
* :class:`LimitOutputBytes` caps every cell's output in **bytes** (nbgrader's ``LimitOutput``
  counts lines only, so a single 20 MB line went straight into the autograded notebook and the
  feedback). Used in ``autograde`` and again in ``generate_feedback``.
* :class:`HideHiddenTestTracebacks` shortens the error of a cell holding hidden tests to its
  last line (``CheckFailed: ...``) in feedback: IPython's traceback quotes the failing source
  line, which would show the hidden test that ``ClearHiddenTests`` removes from the source.

* :class:`OverwriteReleasedCells` replaces ``OverwriteCells`` in ``autograde``: a hidden-test
  cell handed in as released no longer logs "checksum has changed!", so the warning is left for
  cells a student really changed.
* :class:`KeepCleanGrades` replaces ``SaveAutoGrades`` in ``autograde``: a cell that
  ``python -m grader autograde`` graded keeps that clean score when a stock run (the command, or
  Formgrader's Autograde button) grades the same submission again, and the log says so loudly.
* :class:`ClearHiddenTestsFeedback` is ``ClearHiddenTests`` for ``generate_feedback``; with
  :class:`AcceptsDisplayPriority` the course's preprocessors take nbconvert's shared
  ``display_data_priority`` setting instead of warning about it.

Importing this module needs nbgrader (the course pipeline), never the GPU or the emulator.
"""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Tuple

from nbconvert.exporters.exporter import ResourcesDict
from nbformat.notebooknode import NotebookNode
from traitlets import Integer, List, Unicode

from nbgrader import utils
from nbgrader.preprocessors import ClearHiddenTests, ClearSolutions, NbGraderPreprocessor, OverwriteCells, SaveAutoGrades

CUDA_MAGIC = "%%cuda"


def is_cuda_cell(cell: NotebookNode) -> bool:
    """A code cell whose first line is the ``%%cuda NAME`` cell magic."""
    return cell.cell_type == "code" and cell.source.lstrip().startswith(CUDA_MAGIC)


class AcceptsDisplayPriority(NbGraderPreprocessor):
    """``display_data_priority`` as a config trait. nbconvert's HTML exporter (``generate_feedback``)
    configures it for every preprocessor; ``NbGraderPreprocessor`` redeclares it without
    ``config=True``, so each of its subclasses logged "Config option `display_data_priority` not
    recognized" once per feedback run. A base class (listed first)."""

    display_data_priority = List(
        ["text/html", "application/pdf", "text/latex", "image/svg+xml", "image/png", "image/jpeg", "text/plain"],
        help="Accepted for nbconvert's shared configuration; unused here.",
    ).tag(config=True)


class ClearHiddenTestsFeedback(AcceptsDisplayPriority, ClearHiddenTests):
    """nbgrader's ``ClearHiddenTests`` for ``generate_feedback`` (without the config warning)."""


class OverwriteReleasedCells(OverwriteCells):
    """nbgrader's ``OverwriteCells`` (``autograde`` restores locked cells from the gradebook),
    silent about cells exactly as they were released.

    A test cell with hidden tests is released without them, so its source never matches the
    gradebook's, and stock nbgrader logs "Attribute 'checksum' for cell ... has changed!" for
    every hidden-test cell of every submission, which reads as tampering. Here a locked cell
    whose source equals the released one (the gradebook's source with the hidden-test region
    removed, as ``generate_assignment`` does) gets the gradebook's source back first; a cell
    the student changed still gets the warning (and is restored, as before)."""

    begin_test_delimeter = Unicode("BEGIN HIDDEN TESTS", help="Marks a hidden test region.").tag(config=True)
    end_test_delimeter = Unicode("END HIDDEN TESTS", help="Ends a hidden test region.").tag(config=True)

    def released_source(self, source: str) -> str:
        cell = NotebookNode(cell_type="code", source=source, metadata=NotebookNode())
        stripper = ClearHiddenTests(begin_test_delimeter=self.begin_test_delimeter,
                                    end_test_delimeter=self.end_test_delimeter, enforce_metadata=False)
        stripper._remove_hidden_test_region(cell)
        return cell.source

    def preprocess_cell(self, cell: NotebookNode, resources: ResourcesDict, cell_index: int) -> Tuple[NotebookNode, ResourcesDict]:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id is not None and utils.is_locked(cell):
            try:
                source_cell = self.gradebook.find_source_cell(grade_id, self.notebook_id, self.assignment_id)
            except Exception:  # noqa: BLE001  (MissingEntry: the parent reports it)
                source_cell = None
            if (source_cell is not None and source_cell.locked and cell.source != source_cell.source
                    and self.begin_test_delimeter in source_cell.source
                    and cell.source == self.released_source(source_cell.source)):
                cell.source = source_cell.source
        return super().preprocess_cell(cell, resources, cell_index)


class ClearSolutionsCuda(ClearSolutions):
    """``ClearSolutions`` that gives ``%%cuda`` cells a CUDA stub (configure it as
    ``ClearSolutions.*``: traitlets applies a parent class's settings to this subclass)."""

    cuda_stub = Unicode(
        "// YOUR CODE HERE",
        help="What replaces the solution region of a %%cuda cell (indented like the BEGIN line).",
    ).tag(config=True)

    def _replace_solution_region(self, cell: NotebookNode, language: str) -> bool:
        if not is_cuda_cell(cell):
            return super()._replace_solution_region(cell, language)
        stub_lines = self.cuda_stub.split("\n")
        new_lines, in_solution, replaced = [], False, False
        for line in cell.source.split("\n"):
            if self.begin_solution_delimeter in line:
                if in_solution:
                    self.log.error("Nested BEGIN SOLUTION in a %%cuda cell:\n%s", cell.source)
                    raise RuntimeError("encountered nested begin solution statements")
                in_solution = replaced = True
                indent = re.match(r"\s*", line).group(0)
                new_lines.extend(indent + stub for stub in stub_lines)
            elif self.end_solution_delimeter in line:
                in_solution = False
            elif not in_solution:
                new_lines.append(line)
        if in_solution:
            self.log.error("No END SOLUTION in a %%cuda cell:\n%s", cell.source)
            raise RuntimeError("no end solution statement found")
        cell.source = "\n".join(new_lines)
        return replaced

    def preprocess_cell(self, cell: NotebookNode, resources: ResourcesDict, cell_index: int) -> Tuple[NotebookNode, ResourcesDict]:
        if not is_cuda_cell(cell):
            return super().preprocess_cell(cell, resources, cell_index)
        original = cell.source
        replaced = self._replace_solution_region(cell, resources["language"])
        solution = utils.is_solution(cell)
        if replaced and not solution and self.enforce_metadata:
            self.log.error("Solution region in a %%cuda cell that is not a solution cell:\n%s", original)
            raise RuntimeError(
                "Solution region detected in a non-solution cell; please make sure "
                "all solution regions are within solution cells."
            )
        if solution and not replaced:
            # A whole-cell solution: keep the magic line (it names the kernel), stub the rest.
            magic = original.lstrip().split("\n", 1)[0]
            cell.source = magic + "\n" + self.cuda_stub
        return cell, resources


def _utf8_cut(text: str, limit: int) -> str:
    """The longest prefix of ``text`` whose UTF-8 encoding fits in ``limit`` bytes."""
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    return data[:max(limit, 0)].decode("utf-8", errors="ignore")


def _nbytes(value) -> int:
    if isinstance(value, str):
        return len(value.encode("utf-8"))
    if isinstance(value, list):
        return sum(_nbytes(v) for v in value)
    return len(str(value).encode("utf-8"))


class LimitOutputBytes(AcceptsDisplayPriority):
    """Cap each code cell's outputs in bytes: ``max_bytes`` of text (streams, errors, text
    representations) and ``max_rich_bytes`` of everything else (plots: a matplotlib PNG is
    50-100 KB). Counting bytes, not lines, is what keeps a student's
    ``print("x" * 20_000_000)`` out of the autograded notebook and the feedback.

    Text is cut at the limit (never inside a UTF-8 character) and a note says how much was
    dropped; a rich representation over its budget (an image) is dropped, keeping the
    output's plain-text form if it has one. Error outputs are always
    kept, each cut to ``max_bytes``. In ``autograde`` this runs *after* ``SaveAutoGrades``, so
    scores are computed on the full output and capping can never change a grade."""

    max_bytes = Integer(
        100_000,
        help="Maximum bytes of text output kept per code cell (-1: no limit).",
    ).tag(config=True)

    max_rich_bytes = Integer(
        2_000_000,
        help="Maximum bytes of non-text output (images...) kept per code cell (-1: no limit).",
    ).tag(config=True)

    note = Unicode(
        "\n... output truncated: {dropped} more bytes (a cell may show {limit} bytes of text) ...\n",
        help="Appended where output was cut; may use {dropped} and {limit}.",
    ).tag(config=True)

    @staticmethod
    def _is_text(mime: str) -> bool:
        return mime.startswith("text/") or mime in ("application/json", "application/javascript")

    def preprocess_cell(self, cell: NotebookNode, resources: ResourcesDict, cell_index: int) -> Tuple[NotebookNode, ResourcesDict]:
        if cell.cell_type != "code" or not cell.get("outputs"):
            return cell, resources
        unlimited = float("inf")
        text_left = self.max_bytes if self.max_bytes >= 0 else unlimited
        rich_left = self.max_rich_bytes if self.max_rich_bytes >= 0 else unlimited
        kept, dropped = [], 0
        for out in cell.outputs:
            kind = out.get("output_type")
            if kind == "error":
                # Always kept (a failed test must still show as failed), each cut on its own.
                size = self._error_size(out)
                if 0 <= self.max_bytes < size:
                    self._shrink_error(out, self.max_bytes)
                    dropped += size - self._error_size(out)
                kept.append(out)
            elif kind == "stream":
                text = out.get("text", "")
                text = "".join(text) if isinstance(text, list) else text
                size = _nbytes(text)
                if size > text_left:
                    out.text = _utf8_cut(text, int(text_left))
                    dropped += size - _nbytes(out.text)
                text_left -= _nbytes(out.text)
                if out.text:
                    kept.append(out)
            else:  # display_data, execute_result
                data = {}
                for mime, value in out.get("data", {}).items():
                    size = _nbytes(value)
                    if self._is_text(mime):
                        if size <= text_left:
                            data[mime], text_left = value, text_left - size
                        elif mime == "text/plain" and text_left > 0:
                            value = _utf8_cut("".join(value) if isinstance(value, list) else value, int(text_left))
                            data[mime], text_left = value, 0
                            dropped += size - _nbytes(value)
                        else:
                            dropped += size
                    elif size <= rich_left:
                        data[mime], rich_left = value, rich_left - size
                    else:
                        dropped += size
                if data:
                    out.data = data
                    kept.append(out)
        if dropped:
            # stdout, so the note itself never reads as a failure (nbgrader scores a grade
            # cell with any stderr output as 0).
            kept.append(NotebookNode(output_type="stream", name="stdout",
                                     text=self.note.format(dropped=dropped, limit=self.max_bytes)))
            cell.outputs = kept
        return cell, resources

    @staticmethod
    def _error_size(out: NotebookNode) -> int:
        return _nbytes(out.get("ename", "")) + _nbytes(out.get("evalue", "")) + _nbytes(out.get("traceback", []))

    @staticmethod
    def _shrink_error(out: NotebookNode, budget: int) -> None:
        out.evalue = _utf8_cut(out.get("evalue", ""), budget // 2)
        lines, left = [], budget - _nbytes(out.evalue) - _nbytes(out.get("ename", ""))
        for line in out.get("traceback", []):
            if _nbytes(line) > left:
                lines.append(_utf8_cut(line, max(left, 0)))
                break
            lines.append(line)
            left -= _nbytes(line)
        out.traceback = lines


class HideHiddenTestTracebacks(AcceptsDisplayPriority):
    """In cells holding hidden tests, keep only an error's last line (``ename: evalue``).

    Run before ``ClearHiddenTests`` (which recognises the cells by the same delimiter and then
    removes the hidden source). The check's message explains the failure without the source."""

    begin_test_delimeter = Unicode("BEGIN HIDDEN TESTS", help="Marks a hidden test region.").tag(config=True)

    def preprocess_cell(self, cell: NotebookNode, resources: ResourcesDict, cell_index: int) -> Tuple[NotebookNode, ResourcesDict]:
        if cell.cell_type == "code" and self.begin_test_delimeter in cell.source:
            for out in cell.get("outputs", []):
                if out.get("output_type") == "error":
                    out.traceback = [f"\x1b[0;31m{out.get('ename', 'Error')}\x1b[0m: {out.get('evalue', '')}"]
        return cell, resources


class KeepCleanGrades(SaveAutoGrades):
    """``SaveAutoGrades``, except that the clean regrade's score of a cell wins: a stock run
    executes the student's code with the instructor's permissions (a fake ``check()`` passes),
    so where ``grading/clean/ASSIGNMENT/report.json`` holds a clean score for the same bytes of the
    same submission, that score stays in the gradebook and the stock one is logged as overruled.
    A submission changed since the clean run gets the stock score and a request to regrade."""

    clean_dir = Unicode("grading/clean", help="where `python -m grader autograde` writes its reports").tag(config=True)

    def preprocess(self, nb: NotebookNode, resources: ResourcesDict) -> Tuple[NotebookNode, ResourcesDict]:
        info = resources["nbgrader"]
        self._clean = self._clean_scores(info["assignment"], info["student"], info["notebook"])
        return super().preprocess(nb, resources)

    def _clean_scores(self, assignment: str, student: str, notebook: str) -> dict:
        try:
            report = json.loads((Path(self.clean_dir) / assignment / "report.json").read_text())
            row = next(r for r in report["rows"] if r["student"] == student and r["notebook"] == notebook)
        except (OSError, ValueError, KeyError, StopIteration, TypeError):
            return {}
        submitted = Path("grading/submitted") / student / assignment / f"{notebook}.ipynb"
        try:
            now = hashlib.sha256(submitted.read_bytes()).hexdigest()
        except OSError:
            now = None
        if now != row.get("sha256"):
            self.log.warning("%s/%s/%s: changed since the clean regrade; run `python -m grader autograde %s` "
                             "again", student, assignment, notebook, assignment)
            return {}
        return {c["grade_id"]: c["score"] for c in row.get("cells", []) if c.get("score") is not None}

    def _add_score(self, cell: NotebookNode, resources: ResourcesDict) -> None:
        super()._add_score(cell, resources)
        gid = cell.metadata["nbgrader"]["grade_id"]
        if gid not in self._clean:
            return
        grade = self.gradebook.find_grade(gid, self.notebook_id, self.assignment_id, self.student_id)
        if grade.auto_score != self._clean[gid]:
            self.log.error("%s/%s/%s: cell %s scored %s in this run (the notebook ran with your permissions); "
                           "the clean regrade's %s is kept (grading/clean/%s/report.json)", self.student_id,
                           self.assignment_id, self.notebook_id, gid, grade.auto_score, self._clean[gid],
                           self.assignment_id)
            grade.auto_score = self._clean[gid]
            self.gradebook.db.commit()

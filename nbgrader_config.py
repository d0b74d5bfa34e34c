# nbgrader configuration for "FlashAttention from scratch" (nbgrader 0.9.6).
#
# nbgrader reads this file from the current directory only: run every `nbgrader` command
# (and `jupyter lab` for Formgrader) from the repository root; from a subfolder nbgrader
# silently starts a new, empty gradebook. This file puts the interpreter's bin/ first on PATH
# (nbgrader runs `alembic` as a subprocess), keeps the exchange inside the course
# (grading/exchange) and reads the grading seed from grading/seed when that file exists.
#
#   notebooks/<module>/          instructor notebooks (nbgrader "source")
#   exercises/<module>/          what students get (nbgrader "release")
#   solutions/<module>/          instructor notebooks without outputs (nbgrader "solution")
#   grading/submitted/<student>/<module>/    students' notebooks, placed there by you
#   grading/autograded/...  grading/feedback/...  grading/gradebook.db   (git-ignored)
#
# The assignment id of a module is its folder name (00_launching_kernels, ...). nbgrader 0.9
# has no config list of assignments: `nbgrader generate_assignment MODULE` records a module
# (and its graded cells) in the gradebook, and `autograde` adds students as it meets them.
import os
import sys

try:
    from grader.nbgrader_cuda import (
        ClearHiddenTestsFeedback,
        ClearSolutionsCuda,
        HideHiddenTestTracebacks,
        KeepCleanGrades,
        LimitOutputBytes,
        OverwriteReleasedCells,
    )
except ImportError as err:
    # A Python error in this file is only logged by nbgrader, which then carries on with its
    # defaults: Python stubs in CUDA cells and hidden tests shown in feedback. Stop instead.
    sys.stderr.write(
        f"nbgrader_config.py: cannot import the course package ({err}).\n"
        "Run nbgrader from the course's environment: pip install -e . (then .venv/bin first on PATH).\n"
    )
    raise SystemExit(1)

from nbconvert.preprocessors import ClearMetadataPreprocessor, CSSHTMLHeaderPreprocessor
from nbgrader.preprocessors import (
    AssignLatePenalties,
    CheckCellMetadata,
    ClearHiddenTests,
    ClearMarkScheme,
    ClearOutput,
    ComputeChecksums,
    DeduplicateIds,
    Execute,
    GetGrades,
    IgnorePattern,
    IncludeHeaderFooter,
    InstantiateTests,
    LimitOutput,
    LockCells,
    OverwriteKernelspec,
    SaveCells,
)

c = get_config()  # noqa: F821  (provided by traitlets when it loads this file)

# ---------------------------------------------------------------- folders and gradebook
c.CourseDirectory.source_directory = "notebooks"
c.CourseDirectory.release_directory = "exercises"
c.CourseDirectory.solution_directory = "solutions"
c.CourseDirectory.submitted_directory = "grading/submitted"
c.CourseDirectory.autograded_directory = "grading/autograded"
c.CourseDirectory.feedback_directory = "grading/feedback"
c.CourseDirectory.db_url = "sqlite:///grading/gradebook.db"  # relative to the current directory
# SQLite cannot create the file in a missing folder ("unable to open database file"), and
# grading/ is git-ignored, so a fresh clone lacks it.
os.makedirs("grading", exist_ok=True)

# ---------------------------------------------------------------- environment of nbgrader
# nbgrader creates and migrates the gradebook by running `alembic` as a subprocess, found on
# PATH. Run from a virtual environment without activating it (`.venv/bin/jupyter lab`,
# `.venv/bin/nbgrader`), its bin/ is not on PATH: Formgrader then hung on its first load
# (FileNotFoundError: 'alembic') and left a gradebook without its alembic_version table.
_bin = os.path.dirname(sys.executable)
if os.path.exists(os.path.join(_bin, "alembic")) and os.environ.get("PATH", "").split(os.pathsep)[0] != _bin:
    os.environ["PATH"] = _bin + os.pathsep + os.environ.get("PATH", "")

# The secret grading seed (see README, "The secret seed"): GRADER_SEED in the environment, or
# the first line of grading/seed (git-ignored), which also reaches Formgrader's autograde
# button. Notebook kernels that nbgrader starts inherit this environment.
if not os.environ.get("GRADER_SEED") and os.path.exists("grading/seed"):
    with open("grading/seed") as _f:
        _seed = _f.readline().strip()
    if _seed:
        os.environ["GRADER_SEED"] = _seed

# ---------------------------------------------------------------- exchange
# nbgrader's exchange (release_assignment / fetch / submit / collect between accounts of one
# JupyterHub) defaults to /usr/local/share/nbgrader/exchange, which usually does not exist:
# Formgrader then logged at CRITICAL on every page load and showed a banner. This course hands
# out exercises/ by git or the student bundle (`python -m grader release --student DIR`) and
# collects notebooks into grading/submitted/ by hand or with `nbgrader zip_collect`, so the
# exchange lives inside the course, where it is always writable. On a shared JupyterHub, point
# c.Exchange.root at a folder every account can write (and keep c.CourseDirectory.course_id).
c.CourseDirectory.course_id = "flash-attention-course"
c.Exchange.root = os.path.abspath("grading/exchange")
os.makedirs(c.Exchange.root, exist_ok=True)

# ---------------------------------------------------------------- feedback pages, offline
# nbgrader's feedback template loads MathJax from a CDN whatever HTMLExporter.mathjax_url says:
# offline, formulas showed as TeX source. The course's exporter puts MathJax 2.7 (from the
# jupyter-server-mathjax package, ~2 MB) in a mathjax/ folder beside every page, as hard links to
# one copy in grading/feedback/.mathjax-<version>/, and the page loads it by a relative URL: any
# folder handed to a student carries it. A page sent alone (nbgrader's release_feedback copies
# only the .html) falls back to the CDN. GRADER_MATHJAX_URL: every page loads MathJax from that
# URL instead, and no copies are made (grader/feedback_mathjax.py).
c.GenerateFeedback.exporter_class = "grader.feedback_mathjax.FeedbackHTMLExporter"
if os.environ.get("GRADER_MATHJAX_URL"):
    c.HTMLExporter.mathjax_url = os.environ["GRADER_MATHJAX_URL"]
    c.FeedbackHTMLExporter.local_mathjax = False

# ---------------------------------------------------------------- generate_assignment
# nbgrader's default list with ClearSolutions replaced: %%cuda cells get `// YOUR CODE HERE`.
c.GenerateAssignment.preprocessors = [
    IncludeHeaderFooter,
    InstantiateTests,
    LockCells,
    ClearSolutionsCuda,
    ClearOutput,
    CheckCellMetadata,
    ComputeChecksums,
    SaveCells,
    ClearHiddenTests,
    ClearMarkScheme,
    ComputeChecksums,
    CheckCellMetadata,
]

# ---------------------------------------------------------------- generate_solution
# The default list without Execute: solutions/ is the instructor notebook with outputs cleared,
# so it is byte-identical between runs and machines (no timings, no "runs on: cpu/gpu").
# tests/course runs every instructor notebook instead.
c.GenerateSolution.preprocessors = [IncludeHeaderFooter, LockCells, ClearOutput, ClearMarkScheme]

# ---------------------------------------------------------------- autograde
# nbgrader's sanitize list with OverwriteCells replaced: a hidden-test cell handed in exactly as
# released no longer logs "checksum has changed!" (its released source lacks the hidden tests,
# so stock nbgrader warned for every such cell of every submission); a changed cell still does.
c.Autograde.sanitize_preprocessors = [
    ClearOutput,
    DeduplicateIds,
    OverwriteKernelspec,
    OverwriteReleasedCells,
    CheckCellMetadata,
]
# Scores are saved (KeepCleanGrades: nbgrader's SaveAutoGrades, where a cell's score from the clean
# regrade, `python -m grader autograde`, of the same submission wins and the log says so) before
# the byte cap, so capping never changes a grade.
c.Autograde.autograde_preprocessors = [
    Execute,
    IgnorePattern,
    ClearMetadataPreprocessor,
    LimitOutput,
    KeepCleanGrades,
    AssignLatePenalties,
    LimitOutputBytes,
    CheckCellMetadata,
]

# A wall-clock cap, far above a cell's work: a check's kernels are stopped by CPU-time limits
# (grader/checks.py: CPU seconds per case), so a busy machine slows a cell without failing it;
# this only stops a cell whose Python never ends. It is interrupted and fails (CellTimeoutError,
# 0 points for a test cell); the rest of the notebook still runs.
c.Execute.timeout = 600
c.Execute.interrupt_on_timeout = True
c.Execute.error_on_timeout = {
    "ename": "CellTimeoutError",
    "evalue": "this cell ran longer than the time limit and was interrupted",
    "traceback": [
        "\x1b[0;31mCellTimeoutError\x1b[0m: this cell ran longer than the time limit and was "
        "interrupted (an endless loop, or a kernel that never finishes?)"
    ],
}

c.LimitOutput.max_lines = 1000
c.LimitOutput.max_traceback = 100
# nbgrader's LimitOutput counts lines only: one 20 MB line went straight into the feedback.
c.LimitOutputBytes.max_bytes = 100_000  # text per cell (streams, errors, text/plain, HTML)
c.LimitOutputBytes.max_rich_bytes = 2_000_000  # plots and other binary outputs per cell

# ---------------------------------------------------------------- generate_feedback
# Hidden tests stay hidden: their error tracebacks are cut to the message (IPython's traceback
# quotes the failing source line), then their source is removed.
# (ClearHiddenTestsFeedback is ClearHiddenTests that takes nbconvert's display_data_priority.)
c.GenerateFeedback.preprocessors = [
    HideHiddenTestTracebacks,
    ClearHiddenTestsFeedback,
    LimitOutputBytes,
    GetGrades,
    CSSHTMLHeaderPreprocessor,
]

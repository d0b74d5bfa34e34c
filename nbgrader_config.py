# nbgrader configuration for "FlashAttention from scratch" (nbgrader 0.9.6).
#
# nbgrader reads this file from the current directory only: run every `nbgrader` command
# from the repository root (from a subfolder nbgrader silently starts a new, empty gradebook).
# Put the virtual environment's bin/ first on PATH: nbgrader runs `alembic` as a subprocess.
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
    from grader.nbgrader_cuda import ClearSolutionsCuda, HideHiddenTestTracebacks, LimitOutputBytes
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
    Execute,
    GetGrades,
    IgnorePattern,
    IncludeHeaderFooter,
    InstantiateTests,
    LimitOutput,
    LockCells,
    SaveAutoGrades,
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
# Scores are saved (SaveAutoGrades) before the byte cap, so capping never changes a grade.
c.Autograde.autograde_preprocessors = [
    Execute,
    IgnorePattern,
    ClearMetadataPreprocessor,
    LimitOutput,
    SaveAutoGrades,
    AssignLatePenalties,
    LimitOutputBytes,
    CheckCellMetadata,
]

# One cell may run this long: first-call compilation (~1.5 s per kernel with g++) plus the
# emulator running every case. A cell that runs longer is interrupted and fails
# (CellTimeoutError, 0 points for a test cell); the rest of the notebook still runs.
c.Execute.timeout = 120
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
c.GenerateFeedback.preprocessors = [
    HideHiddenTestTracebacks,
    ClearHiddenTests,
    LimitOutputBytes,
    GetGrades,
    CSSHTMLHeaderPreprocessor,
]

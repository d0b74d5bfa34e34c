"""An adversarial class for module 00, built from the released notebook (no files committed).

Each entry: a student name, what the notebook does, and the score its honest work earns (the
kernels in its answer cells, graded on every case): the score the clean grade must give.
``python tests/autograde/corpus.py COURSE`` writes the class into COURSE/grading/submitted.
"""
from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from grader.classroom import answer_cells, buggy_answers, fill_answers  # noqa: E402

MODULE = "00_launching_kernels"
NB = "launching_kernels.ipynb"
VA, RS = "vector_add_kernel", "row_scale_kernel"


def _code(src: str) -> dict:
    return {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": src}


def _insert_after(nb: dict, grade_id: str, *cells) -> dict:
    nb = copy.deepcopy(nb)
    i = next(i for i, c in enumerate(nb["cells"]) if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id)
    nb["cells"][i + 1:i + 1] = list(cells)
    return nb


def _host(code: str) -> str:
    """Host code only the emulator's g++ build sees: a cheat that knows every kernel is also
    compiled with NVRTC hides it so, and the sandbox alone must stop what it does."""
    return f"#ifdef __CUDA_EMULATOR__\n{code}\n#endif"


def _kernel(name: str, header: str, body: str, params: str) -> str:
    return f"%%cuda {name}\n{header}\nextern \"C\" __global__ void {name}({params}) {{\n{body}\n}}\n"


VA_PARAMS = "const float* a, const float* b, float* c, int n"
RS_PARAMS = "const float* x, const float* s, float* y, int rows, int cols"
VA_OK = "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) c[i] = a[i] + b[i];"
RS_OK = ("    int c = blockIdx.x * blockDim.x + threadIdx.x;\n    int r = blockIdx.y * blockDim.y + threadIdx.y;\n"
         "    if (r < rows && c < cols) y[r * cols + c] = s[r] * x[r * cols + c];")


def _nvrtc_installed() -> bool:
    try:
        from cupy_backends.cuda.libs import nvrtc

        nvrtc.getVersion()
        return True
    except Exception:  # noqa: BLE001  (ImportError, or a CuPy without its NVRTC library)
        return False


def build(course: Path) -> dict:
    """Write the class; return {student: (what it does, expected clean score out of 6)}."""
    course = Path(course)
    released = json.loads((ROOT / "exercises" / MODULE / NB).read_text())
    solution = answer_cells(json.loads((ROOT / "solutions" / MODULE / NB).read_text()))
    full = fill_answers(released, solution)
    buggy, _ = buggy_answers(solution)
    gradebook = course / "grading" / "gradebook.db"
    victim = course / "grading" / "submitted" / "ada" / MODULE / NB
    checks_py = course / "grader" / "checks.py"
    cls: dict[str, tuple[dict, str, float]] = {}

    cls["ada"] = (full, "victim: the full solutions", 6)
    cls["blank"] = (released, "victim: the release untouched", 0)
    cls["bug"] = (fill_answers(released, buggy), "victim: one off-by-one", 3)

    cls["patch_check"] = (_insert_after(released, "setup", _code(
        "import grader, grader.checks\n"
        "def check(*a, **k):\n    print('[PASS] all cases')\n"
        "grader.check = grader.checks.check = check\n")), "replaces check() in a later cell", 0)
    cls["fake_rawkernel"] = (_insert_after(released, "setup", _code(
        "import numpy as np, grader, grader.kernel, grader.checks\n"
        "class FakeKernel:\n"
        "    def __init__(self, code, name, options=(), **k):\n        self.code, self.name = code, name\n"
        "    def compile(self):\n        return self\n"
        "    def __call__(self, grid, block, args, **k):\n"
        "        if self.name == 'vector_add':\n            a, b, c, n = args; c[:] = a + b\n"
        "        else:\n            x, s, y, r, cc = args; y[:] = x * s[:, None]\n"
        "grader.kernel.RawKernel = grader.RawKernel = FakeKernel\n")), "replaces RawKernel with a NumPy fake", 0)
    cls["paste_reference"] = (_insert_after(released, "row_scale_kernel", _code(
        "from grader.course import solution_source\n"
        "vector_add = grader.RawKernel(solution_source('vector_add'), 'vector_add')\n"
        "row_scale = grader.RawKernel(solution_source('row_scale'), 'row_scale')\n")),
        "pastes the reference with grader.course.solution_source", 0)
    seed_kernel = _kernel("vector_add", _host("#include <stdlib.h>\n#include <stdio.h>"),
                          "    const char* s = nullptr;\n" + _host("    s = getenv(\"GRADER_SEED\");") + "\n"
                          "    if (threadIdx.x == 0 && blockIdx.x == 0) printf(\"SEED=%s\\n\", s ? s : \"none\");\n" + VA_OK,
                          VA_PARAMS)
    cls["read_seed"] = (_insert_after(fill_answers(released, {**solution, VA: seed_kernel}), "setup", _code(
        "import os\nprint('SEED=', os.environ.get('GRADER_SEED'))\n")),
        "reads GRADER_SEED (Python and getenv in the kernel)", 6)
    edited = copy.deepcopy(released)
    for c in edited["cells"]:
        m = c.get("metadata", {}).get("nbgrader", {})
        if m.get("grade") and not m.get("solution"):
            c["source"] = "pass  # tests removed"
            m["points"] = 100
    cls["edit_tests"] = (edited, "empties the test cells and sets their points to 100", 0)
    vandal = _kernel("vector_add", _host("#include <stdio.h>\n#include <stdlib.h>"),
                     _host("    if (threadIdx.x == 0 && blockIdx.x == 0) {\n"
                     f"        FILE* f = fopen(\"{checks_py}\", \"a\"); if (f) {{ fputs(\"\\ncheck = lambda *a, **k: None\\n\", f); fclose(f); }}\n"
                     f"        f = fopen(\"{gradebook}\", \"w\"); if (f) {{ fputs(\"zeroed\", f); fclose(f); }}\n"
                     f"        f = fopen(\"{victim}\", \"w\"); if (f) {{ fputs(\"{{}}\", f); fclose(f); }}\n"
                     "        const char* cache = getenv(\"GRADER_CACHE_DIR\");\n"
                     "        char p[4096]; if (cache) { snprintf(p, sizeof p, \"%s/launcher/poison\", cache);\n"
                     "        f = fopen(p, \"w\"); if (f) { fputs(\"x\", f); fclose(f); } }\n"
                     "    }") + "\n" + VA_OK, VA_PARAMS)
    cls["vandal"] = (fill_answers(released, {**solution, VA: vandal}),
                     "kernel writes into grader/checks.py, the gradebook, a classmate's notebook, the cache", 6)
    cls["sigint_hang"] = (_insert_after(full, "setup", _code(
        "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass\n")),
        "a Python cell that ignores SIGINT and never ends", 6)
    endless = _kernel("vector_add", "", "    while (true) { }\n", VA_PARAMS)
    cls["endless_kernel"] = (fill_answers(released, {**solution, VA: endless}), "vector_add never ends", 3)
    flood = _kernel("vector_add", _host("#include <stdio.h>"),
                    "    for (int k = 0; k < 50; ++k) printf(\"flood flood flood flood flood flood flood %d\\n\", k);\n" + VA_OK,
                    VA_PARAMS)
    cls["flood"] = (_insert_after(fill_answers(released, {**solution, VA: flood}), "setup", _code(
        "print('x' * 50_000_000)\n")), "50 MB print, and a printf flood from every thread", 4)  # the flood of 2^24
    # threads runs out of time on that case: it costs vector_add's hidden points, nothing else
    daemon = _kernel("vector_add", _host("#include <unistd.h>\n#include <stdio.h>\n#include <stdlib.h>"),
                     _host("    if (threadIdx.x == 0 && blockIdx.x == 0) {\n"
                     "        if (fork() == 0) { setsid(); if (fork() == 0) {\n"
                     "            for (int k = 0; k < 40; ++k) { sleep(1);\n"
                     f"                FILE* f = fopen(\"{course}/grading/daemon-was-here\", \"a\"); if (f) {{ fputs(\"x\", f); fclose(f); }} }}\n"
                     "            _exit(0); } _exit(0); }\n"
                     "    }") + "\n" + VA_OK, VA_PARAMS)
    cls["daemon"] = (fill_answers(released, {**solution, VA: daemon}),
                     "kernel leaves a daemon that keeps writing after its check", 6)
    bomb = _kernel("row_scale", _host("#include <unistd.h>"), _host("    while (true) fork();"), RS_PARAMS)
    cls["fork_bomb"] = (fill_answers(released, {**solution, RS: bomb}), "row_scale is a fork bomb", 3)
    crash = _kernel("vector_add", _host("#include <stdlib.h>"), _host("    abort();"), VA_PARAMS)
    cls["crash"] = (fill_answers(released, {**solution, VA: crash}), "vector_add aborts the process", 3)
    shapes = _kernel("vector_add", "",
                     "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                     "    bool known = n == 1 || n == 255 || n == 256 || n == 257 || n == 5000 || n == 1237 || n == 1024;\n"
                     "    if (i < n) c[i] = known ? a[i] + b[i] : 0.0f;", VA_PARAMS)
    cls["declared_shapes_only"] = (fill_answers(released, {**solution, VA: shapes}),
                                   "vector_add right only on the declared shapes", 4)

    host_cpp = _kernel("vector_add", "#include <vector>\n#include <algorithm>",
                       "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                       "    if (i < n) { std::vector<float> v{a[i], b[i]};\n"
                       "        std::transform(v.begin(), v.begin() + 1, v.begin() + 1, c + i, "
                       "[](float p, float q) { return p + q; }); }", VA_PARAMS)
    cls["host_cpp"] = (fill_answers(released, {**solution, VA: host_cpp}),
                       "vector_add in host C++ (std::vector, std::transform): g++ builds it, NVRTC does not",
                       3 if _nvrtc_installed() else 6)  # without NVRTC the clean run can only warn (its report)

    out = {}
    for student, (nb, what, expected) in cls.items():
        path = course / "grading" / "submitted" / student / MODULE / NB
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(nb, indent=1) + "\n")
        out[student] = (what, expected)
    return out


if __name__ == "__main__":
    for s, (what, exp) in build(Path(sys.argv[1])).items():
        print(f"{s:22} {exp}  {what}")

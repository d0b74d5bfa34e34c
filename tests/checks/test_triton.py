"""Module 12's Triton checks on the CPU interpreter: wrong kernels fail with the intended diagnosis,
the interpreter's bugs never reach a student, and the clean regrade grades ``%%triton`` cells.

Wrong kernels are edits of the instructor's solutions (notebooks/12_triton), as data rows:
(exercise, what the edit does, text replaced, replacement, what the failure must say).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from grader import triton_support  # noqa: E402

triton_support.ensure_mode()  # before triton's first import: the interpreter on a machine without a GPU
pytest.importorskip("triton")
pytest.importorskip("torch")

from grader.checks import run_check  # noqa: E402
from grader.course import solution_source  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MODULE = "12_triton"
FLASH = "triton_flash_forward"
CAUSAL = "triton_flash_forward_causal"
BACKWARD = "triton_flash_backward"

WRONG = [
    ("triton_softmax", "tail lanes loaded as 0", 'other=-float("inf")', "other=0.0", "masked columns loaded as 0"),
    ("triton_softmax", "no max subtracted", "tl.exp(x - tl.max(x, axis=0))", "tl.exp(x)", "max not subtracted"),
    ("triton_softmax", "strides ignored", "row * sxr + c * sxc", "row * cols + c", "'column_major_input'"),
    (FLASH, "L left in base 2", "(m_i + tl.log2(l_i)) / 1.4426950408889634", "m_i + tl.log2(l_i)", "L in base 2"),
    (FLASH, "exp2 on natural-log scores", "scale * LOG2E", "scale", "exp2 without log2(e) folded into the scale"),
    (FLASH, "tail keys not masked", 's = tl.where(cols[None, :] < N, s, -float("inf"))', "s = s + 0.0",
     "keys past N not masked"),
    (FLASH, "accumulator not rescaled", "acc * alpha[:, None]", "acc", "missing rescale of the output accumulator"),
    (FLASH, "running sum not rescaled", "l_i = l_i * alpha + tl.sum(p, 1)", "l_i = l_i + tl.sum(p, 1)",
     "missing rescale of the running sum"),
    # the solution scales the float32 scores (in the FMA); this rounds q * scale to half first
    (FLASH, "scale folded into q in half precision", "        s = tl.dot(q, k)  #",
     "        s = tl.dot((q * qk_scale).to(q.dtype), k) / qk_scale  #", "elements of L"),
    (FLASH, "strides of the [B, N, H, d] view ignored", "rows[:, None] * sqn", "rows[:, None] * D", "'bnhd_layout'"),
    (CAUSAL, "mask off by one", "cols[None, :] <= rows[:, None]", "cols[None, :] < rows[:, None]",
     "mask off by one on the diagonal"),
    (CAUSAL, "diagonal block unmasked", "BLOCK_N, True, True)", "BLOCK_N, True, False)", "diagonal block not masked"),
    (CAUSAL, "every key block visited, masked", "rows, diag, tl.minimum(diag + BLOCK_M, N), N,", "rows, diag, N, N,",
     "the values are right, but the work is not"),
    (BACKWARD, "D from dO and V", "](o, do, delta, N, H, *o.stride(),", "](v, do, delta, N, H, *v.stride(),",
     "D computed from dO and V instead of dO and O"),
    (BACKWARD, "no preprocess: D = 0", "torch.empty((B, H, N), dtype=torch.float32, device=q.device)  # scratch: D = "
     "rowsum(dO * O)\n    _bwd_preprocess[(triton.cdiv(N, 64), B * H)](o, do, delta, N, H, *o.stride(), *do.stride(), "
     "D=D, BLOCK_M=64)\n", "torch.zeros((B, H, N), dtype=torch.float32, device=q.device)\n",
     "dS without the D term (no preprocess)"),
    (BACKWARD, "L left in natural log inside exp2", "other=0.0) * 1.4426950408889634", "other=0.0)",
     "P from the natural-log L in base 2"),
    (BACKWARD, "L not subtracted", "return tl.load(L + rows * sln, mask=rows < N, other=0.0) * 1.4426950408889634",
     "return 0.0 * tl.load(L + rows * sln, mask=rows < N, other=0.0)", "P recomputed without L"),
    (BACKWARD, "no scale on dQ or dK", " * scale, mask=inside)", ", mask=inside)", "dS without the scale"),
    (BACKWARD, "no scale on dQ", "dq * scale", "dq", "dQ missing the scale"),
    (BACKWARD, "no scale on dK", "dk * scale", "dk", "dK missing the scale"),
    (BACKWARD, "dQ and dK scaled by scale * log2(e)", "scales = (scale * LOG2E, scale, N, H)",
     "scales = (scale * LOG2E, scale * LOG2E, N, H)", "dQ and dK scaled by scale * log2(e)"),
    (BACKWARD, "scale from d", "scales = (scale * LOG2E, scale, N, H)", "scales = (D ** -0.5 * LOG2E, D ** -0.5, N, H)",
     "scale computed from d instead of the scale argument"),
    (BACKWARD, "strides of the [B, N, H, d] view of O ignored", "rows[:, None] * son", "rows[:, None] * D",
     "'bnhd_layout'"),
    (BACKWARD, "keys past N not masked in dQ", "p = tl.where(cols[None, :] < N, p, 0.0)", "p = p + 0.0",
     "'all_scores_below_minus_87'"),
    (BACKWARD, "dK scaled by scale * log2(e)", "dk * scale, mask=inside)", "dk * scale * LOG2E, mask=inside)",
     "dK scaled by scale * log2(e)"),
    (FLASH, "accumulator rounded to half", "acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])",
     "acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None]).to(v.dtype).to(tl.float32)", "accumulated in half precision"),
    (CAUSAL, "accumulator rounded to half", "acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])",
     "acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None]).to(v.dtype).to(tl.float32)", "accumulated in half precision"),
    (BACKWARD, "D from half-precision products", "tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)", "tl.sum(o * do, 1)",
     "D computed in half precision"),
    (FLASH, "running max starts at 0", 'm_i = tl.full((BLOCK_M,), -float("inf"), tl.float32)',
     "m_i = tl.zeros((BLOCK_M,), tl.float32)", "running max starts at 0"),
    # out-of-bounds accesses are stopped before the interpreter makes them (a store used to kill the process)
    (FLASH, "L stored without its row mask", "(m_i + tl.log2(l_i)) / 1.4426950408889634, mask=rows < N)",
     "(m_i + tl.log2(l_i)) / 1.4426950408889634)", "the kernel made a tl.store outside every tensor"),
    (FLASH, "K's last two strides swapped", "*k.stride(),", "k.stride(0), k.stride(1), k.stride(3), k.stride(2),",
     "the kernel made a tl.load outside every tensor"),
    ("triton_softmax", "a program per column", "softmax_kernel[(rows,)]", "softmax_kernel[(cols,)]",
     "the kernel made a tl.load outside every tensor"),
]


def _edit(source: str, old: str, new: str) -> str:
    assert source.count(old) >= 1, f"the solution no longer contains {old!r}"
    return source.replace(old, new)


@pytest.mark.parametrize("exercise,what,old,new,says", WRONG, ids=[f"{w[0]}:{w[1]}" for w in WRONG])
def test_wrong_kernel_fails_naming_the_mistake(exercise, what, old, new, says):
    result = run_check(exercise, _edit(solution_source(exercise), old, new), seed=3)
    assert not result.passed, f"{what}: passed"
    assert says in result.first_failure.message, result.first_failure.message


def test_a_stub_says_what_is_missing_with_the_students_line():
    released = json.loads((ROOT / "exercises" / MODULE / "triton.ipynb").read_text())
    cell = next("".join(c["source"]) for c in released["cells"] if "".join(c["source"]).startswith("%%triton softmax"))
    result = run_check("triton_softmax", cell.partition("\n")[2])
    msg = result.first_failure.message
    assert "NotImplementedError" in msg and "line " in msg and "raise NotImplementedError()" in msg, msg


def test_a_cell_without_the_launcher_is_named():
    result = run_check(FLASH, "import triton\n\ndef flash_fwd(q, k, v, o, lse, scale):\n    pass\n")
    assert "defines no function named 'flash_forward'" in result.first_failure.message


def test_a_kernel_that_never_ends_is_stopped(monkeypatch):
    from grader.exercises import m12_triton  # noqa: F401
    from grader.checks import get_exercise

    src = _edit(solution_source("triton_softmax"), "    row = tl.program_id(0)\n",
                "    row = tl.program_id(0)\n    while row >= 0:\n        row = row + 0\n")
    ex = get_exercise("triton_softmax")
    monkeypatch.setattr(ex, "time_limit", 1.0)
    result = run_check(ex, src)
    assert "the launch was stopped after 1 s of CPU time, its time limit" in result.results[0].message
    assert all("not run" in r.message for r in result.results[1:])


def test_bf16_dot_is_exact_in_the_patched_interpreter():
    triton_support.require()
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def dot(A, B, C, M: tl.constexpr):
        i = tl.arange(0, M)
        a = tl.load(A + i[:, None] * M + i[None, :])
        b = tl.load(B + i[:, None] * M + i[None, :])
        tl.store(C + i[:, None] * M + i[None, :], tl.dot(a, b))

    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(16, 16, generator=g).to(torch.bfloat16) for _ in range(2))
    c = torch.empty(16, 16)
    triton_support.DOT_WORK.reset()
    dot[(1,)](a, b, c, M=16)
    assert np.abs((a.float() @ b.float() - c).numpy()).max() < 1e-5
    assert triton_support.DOT_WORK.macs == 16 ** 3 and triton_support.DOT_WORK.calls == 1


def test_bf16_conversion_rounds_to_nearest_in_the_patched_interpreter():
    """float32 -> bfloat16 (x.to(tl.bfloat16), and a float32 stored through a bfloat16 pointer) rounds to
    nearest even, as torch and a GPU do; triton 3.9's interpreter rounds towards zero."""
    triton_support.require()
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def convert(X, Y, Z, M: tl.constexpr):
        i = tl.arange(0, M)
        x = tl.load(X + i)
        tl.store(Y + i, x.to(tl.bfloat16))
        tl.store(Z + i, x)

    x = torch.tensor([0.99999, 1 - 2 ** -9 + 1e-6, 1 - 2 ** -9 - 1e-6, -0.99999, 3.14159, 1e-30, 3.4e38, 0.0])
    y, z = (torch.empty(8, dtype=torch.bfloat16) for _ in range(2))
    convert[(1,)](x, y, z, M=8)
    want = x.to(torch.bfloat16).view(torch.int16)
    assert torch.equal(y.view(torch.int16), want) and torch.equal(z.view(torch.int16), want), (y, x.to(torch.bfloat16))


def test_bf16_arithmetic_and_reductions_use_values_in_the_patched_interpreter():
    """Element-wise bf16 arithmetic, sums and maxima compute on the values (triton 3.9's interpreter
    computed on the uint16 storage: tl.sum(x * y) gave -4e8 for 3.0)."""
    triton_support.require()
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def reduce(X, Y, OUT, M: tl.constexpr):
        i = tl.arange(0, M)
        x = tl.load(X + i)
        y = tl.load(Y + i)
        tl.store(OUT + 0, tl.sum(x * y, 0).to(tl.float32))
        tl.store(OUT + 1, tl.max(x - y, 0).to(tl.float32))
        tl.store(OUT + 2, tl.min(x * 2.0, 0).to(tl.float32))

    g = torch.Generator().manual_seed(0)
    x, y = (torch.randn(16, generator=g).to(torch.bfloat16) for _ in range(2))
    out = torch.zeros(3)
    reduce[(1,)](x, y, out, M=16)
    xf, yf = x.float(), y.float()
    want = torch.stack([(xf * yf).sum(), (xf - yf).max(), (xf * 2).min()])
    assert torch.allclose(out, want, rtol=2 ** -7, atol=2 ** -7), (out, want)


def test_a_one_element_block_is_an_index_in_the_patched_interpreter():
    """range(lo, hi, STEP) with lo and hi computed in the kernel: triton 3.6's interpreter took int() of a
    one-element array, which numpy 2.4 refuses; the patched __index__ squeezes it (as triton 3.8's does)."""
    triton_support.require()
    from triton.runtime import interpreter

    class Scope:
        def set_attr(self, obj, name, value):
            setattr(obj, name, value)

    class Handle:
        data = np.array([7], np.int32)

    class Tensor:
        handle = Handle()

    interpreter._patch_lang_tensor(Tensor, Scope())
    assert list(range(Tensor(), 10)) == [7, 8, 9]


def test_without_triton_the_check_says_what_to_install(monkeypatch):
    def missing(source, name):
        raise triton_support.TritonUnavailable(f"this exercise needs Triton and PyTorch (triton is missing): "
                                               f"{triton_support.INSTALL}")

    monkeypatch.setattr(triton_support, "load_module", missing)
    result = run_check(FLASH, solution_source(FLASH))
    assert not result.passed and "pip install -e '.[triton]'" in result.first_failure.message
    assert "not checked" in result.first_failure.message


def test_removed_block_pointers_are_explained():
    src = _edit(solution_source("triton_softmax"), "    c = tl.arange(0, BLOCK)\n",
                "    c = tl.arange(0, BLOCK)\n    tl.make_block_ptr(X, (cols,), (sxc,), (0,), (BLOCK,), (0,))\n")
    import triton

    msg = run_check("triton_softmax", src).first_failure.message
    if tuple(int(x) for x in triton.__version__.split(".")[:2]) >= (3, 9):
        assert "tl.make_tensor_descriptor" in msg, msg


def test_hidden_shapes_keep_the_head_dimension():
    from grader.autograde.shapes import draw_cases
    from grader.checks import get_exercise

    ex = get_exercise(FLASH)
    drawn = draw_cases(ex.cases, 99, ex.hidden_sizes)
    assert [c.params["d"] for c in drawn] == [c.params["d"] for c in ex.cases]
    assert any(a.params["N"] != b.params["N"] for a, b in zip(drawn, ex.cases) if b.hidden)


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="the clean regrade's sandbox (bubblewrap) is missing")
def test_clean_regrade_grades_triton_cells(tmp_path):
    from grader.autograde import autograde
    from grader.autograde.sandbox import Limits

    course = tmp_path / "course"
    for d in (f"exercises/{MODULE}", f"notebooks/{MODULE}"):
        shutil.copytree(ROOT / d, course / d)
    shutil.copytree(ROOT / "grader", course / "grader", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy(ROOT / "nbgrader_config.py", course)
    for student, src in (("solved", ROOT / "solutions"), ("blank", ROOT / "exercises")):
        dest = course / "grading" / "submitted" / student / MODULE
        dest.mkdir(parents=True)
        shutil.copy(src / MODULE / "triton.ipynb", dest / "triton.ipynb")
    half = json.loads((course / "grading/submitted/solved" / MODULE / "triton.ipynb").read_text())
    blank = json.loads((ROOT / "exercises" / MODULE / "triton.ipynb").read_text())
    stub = {c["metadata"]["nbgrader"]["grade_id"]: c for c in blank["cells"] if c["metadata"].get("nbgrader")}
    half["cells"] = [stub["flash_forward_causal_kernel"] if c["metadata"].get("nbgrader", {}).get("grade_id") ==
                     "flash_forward_causal_kernel" else c for c in half["cells"]]
    dest = course / "grading" / "submitted" / "half" / MODULE
    dest.mkdir(parents=True)
    (dest / "triton.ipynb").write_text(json.dumps(half))
    out = autograde(MODULE, root=course, workers=2, seed=7, quiet=True, write_notebooks=False,
                    limits=Limits(wall_s=120, cpu_s=240))
    scores = {r.student: r.score for r in out["rows"]}
    # 15 points: softmax 2, forward 5, causal 5, backward (bonus) 3; "half" lacks the causal kernel
    assert scores == {"solved": 15.0, "half": 10.0, "blank": 0.0}, out["text"]


def test_grader_bench_points_triton_cells_to_their_benchmark():
    from grader.benchmark import bench
    from grader.errors import CourseError

    with pytest.raises(CourseError, match="bench_12_triton.py --source-dir"):
        bench(FLASH, solution_source(FLASH))

"""The comparison rule, inputs that must come back unchanged, and faults shown before numbers."""
import numpy as np
import pytest

from grader.checks import CheckFailed, check, run_check
from grader.exercise_rows import PRODUCT_NAN
from grader.judge import compare, error_ratio, within
from grader.kernel import RawKernel


@pytest.mark.parametrize("got, ok", [(-np.inf, True), (0.0, False), (-1e30, False), (np.finfo(np.float32).min, False),
                                     (np.inf, False), (np.nan, False)])
def test_minus_infinity_must_match_exactly(got, ok):
    assert within(np.array([got]), np.array([-np.inf]), 2e-5, 2e-5).item() is ok


def test_nan_only_where_nan_is_expected():
    assert not within(np.array([np.nan]), np.array([1.0]), 2e-5, 2e-5).item()
    assert within(np.array([np.nan]), np.array([np.nan]), 2e-5, 2e-5).item()
    assert not within(np.array([1.0]), np.array([np.nan]), 2e-5, 2e-5).item()


def test_a_computed_nan_is_explained_for_the_kind_of_kernel():
    got, want, never = np.array([np.nan, 1.0], np.float32), np.array([2.0, 1.0]), np.zeros(2, bool)
    softmax = compare("O", got, want, (2e-5, 2e-5), never, "gpu")
    assert "1 element(s) are NaN computed by the kernel, the first at O[0]" in softmax
    assert "NaN comes from inf - inf, 0 * inf or 0 / 0: e.g. exp(m_old - m_new)" in softmax
    product = compare("C", got, want, (2e-5, 2e-5), never, "gpu", nan_causes=PRODUCT_NAN)
    assert "NaN comes from inf - inf, 0 * inf or 0 / 0: the inputs here are finite" in product
    assert "m_old" not in product
    plain = compare("c", got, want, (2e-5, 2e-5), never, "gpu", nan_causes="")
    assert "NaN comes from inf - inf, 0 * inf or 0 / 0." in plain and "m_old" not in plain


def test_infinity_mismatch_is_named():
    msg = compare("L", np.array([0.0, 1.0], np.float32), np.array([-np.inf, 1.0]), (2e-5, 2e-5), np.zeros(2, bool))
    assert "are not -inf where -inf was expected" in msg and "L[0]" in msg


def test_tolerance_scales_with_the_size_of_the_terms():
    want, got = np.array([1e-3]), np.array([1e-3 + 1e-4])
    assert not within(got, want, 2e-5, 2e-5).item()
    assert within(got, want, 2e-5, 2e-5, magnitude=np.array([10.0])).item()  # terms of size 10 cancelled
    assert error_ratio(got, want, (2e-5, 2e-5), np.array([10.0])) == pytest.approx(1e-4 / (2e-5 + 2e-4))
    assert error_ratio(np.array([0.0]), np.array([-np.inf]), (2e-5, 2e-5)) == np.inf


WRITES_INPUT = r'''
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { c[i] = a[i] + b[i]; ((float*)a)[i] = 0.0f; }
}
'''


def test_emulator_copies_const_inputs_back():
    k = RawKernel(WRITES_INPUT, "vector_add", backend="cpu")
    a, b, c = np.ones(10, np.float32), np.ones(10, np.float32), np.zeros(10, np.float32)
    k(1, 32, (a, b, c, np.int32(10)))
    assert (c == 2).all() and (a == 0).all()


def test_a_write_into_an_input_fails_by_name():
    result = run_check("vector_add", WRITES_INPUT, backend="cpu", seed=1)
    assert not result.passed
    assert "the kernel wrote into its input a" in result.first_failure.message


# Wrong numbers on every case, and an out-of-bounds write only on the later, larger cases.
FAULTS_LATE = r'''
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] - b[i];
    if (n > 1000 && i == 0) c[n + 100] = 1.0f;
}
'''


def test_a_fault_is_shown_before_wrong_numbers(monkeypatch):
    result = run_check("vector_add", FAULTS_LATE, backend="cpu", seed=1)
    assert not result.results[0].fault and not result.results[0].passed  # the first case only mismatches
    first = result.first_failure
    assert first.fault and "OutOfBoundsError" in first.message, first.message
    import sys

    monkeypatch.setattr(sys.modules["grader.backend"], "_active", "cpu")
    with pytest.raises(CheckFailed, match="OutOfBoundsError"):
        check("vector_add", FAULTS_LATE, quiet=True)


def test_the_check_command_shows_the_first_failure(tmp_path, capsys):
    from grader.__main__ import main

    path = tmp_path / "k.cu"
    path.write_text(WRITES_INPUT)
    assert main(["check", "vector_add", str(path), "--backend", "cpu"]) == 1
    assert "the kernel wrote into its input a" in capsys.readouterr().out


# bfloat16 outputs: stored as their bits (uint16), compared as values with bfloat16's tolerance.
BF16_COPY = r'''
#include <cuda_bf16.h>
extern "C" __global__ void to_bf16(const float* x, __nv_bfloat16* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n - SKIP) y[i] = __float2bfloat16(x[i] * FACTOR);
}
'''


def _bf16_exercise():
    from types import SimpleNamespace

    from grader.exercise_rows import Exercise, case

    return Exercise(
        id="to_bf16", module="tests", kernel="to_bf16",
        signature="to_bf16(const float* x, __nv_bfloat16* y, int n)", launch_shape="one thread per element",
        make_inputs=lambda p, rng: {"x": rng.standard_normal(p.n).astype(np.float32)},
        outputs={"y": lambda p: ((p.n,), "bfloat16")},
        reference=lambda p, x: {"y": x["x"].astype(np.float64)},
        args=lambda p, a: (a.x, a.y, np.int32(p.n)), grid=lambda p: (p.n + 63) // 64, block=lambda p: 64,
        cases=[case("small", n=100, seed=1)])


@pytest.mark.parametrize("skip, factor, verdict", [(0, 1.0, "pass"), (1, 1.0, "never written"), (0, 1.1, "differ")])
def test_bfloat16_outputs_are_compared_as_values(skip, factor, verdict):
    from grader.checks import run_case
    from grader.emulator import compile_kernel
    from grader.signature import parse_signature
    from grader.source import translation_unit

    ex = _bf16_exercise()
    tu = translation_unit(BF16_COPY)
    k = compile_kernel(tu, "to_bf16", parse_signature(tu, "to_bf16"), (f"-DSKIP={skip}", f"-DFACTOR={factor}f"))
    launch = lambda grid, block, args, shared_mem=0, **kw: k.launch(  # noqa: E731
        (grid, 1, 1), (block, 1, 1), list(args), shared_mem, **kw)
    result = run_case(ex, launch, ex.cases[0], seed=1, be="cpu")
    if verdict == "pass":
        assert result.passed, result.message
    else:
        assert not result.passed and verdict in result.message, result.message


ENDLESS = r'''
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    while (i >= 0) i = i * 1;
    if (i < n) c[i] = a[i] + b[i];
}
'''


def test_an_endless_kernel_costs_one_case(monkeypatch):
    monkeypatch.setenv("GRADER_CHECK_TIME_LIMIT", "0.5")
    first, *rest = run_check("vector_add", ENDLESS).results
    assert "the kernel did not finish (KernelTimeoutError).\n  vector_add: stopped after 0.5 s of CPU time (" \
        in first.message and "line 4" in first.message
    assert "set GRADER_CHECK_TIME_LIMIT (CPU seconds per case in a check, now 0.5)" in first.message
    assert rest and all(f"not run: the kernel did not finish case '{first.case.name}'" in r.message for r in rest)


def test_a_long_check_says_which_case_it_is_on_and_a_short_one_stays_silent(monkeypatch, capsys):
    import io

    import grader.checks
    from grader.course import solution_source

    assert run_check("vector_add", solution_source("vector_add")).passed  # built now: the next check is short
    quiet = io.StringIO()
    assert run_check("vector_add", solution_source("vector_add"), progress=quiet).passed
    assert quiet.getvalue() == ""  # well under PROGRESS_AFTER seconds
    monkeypatch.setattr(grader.checks, "PROGRESS_AFTER", 0.0)
    said = io.StringIO()
    result = run_check("vector_add", solution_source("vector_add"), progress=said)
    lines = said.getvalue().splitlines()
    n = len(result.results)
    assert [ln.split(" (")[0] for ln in lines] == ["[vector_add] compiling the kernel"] + [
        f"[vector_add] case {k + 1} of {n}: '{r.case.name}'" for k, r in enumerate(result.results)]
    assert all(ln.endswith(" s so far)") for ln in lines)


def test_a_step_still_running_after_a_few_seconds_is_named_while_it_runs(monkeypatch):
    import io
    import re
    import time

    import grader.checks

    monkeypatch.setattr(grader.checks, "PROGRESS_AFTER", 0.2)
    said = io.StringIO()
    progress = grader.checks._Progress(said, "vector_add")
    progress.step("compiling the kernel")
    progress.step("case 1 of 2: 'slow'")  # replaces the step before it was shown
    time.sleep(0.6)
    assert re.fullmatch(r"\[vector_add\] case 1 of 2: 'slow' \(\d+ s so far\)\n", said.getvalue())
    progress.step("case 2 of 2: 'late'")  # past PROGRESS_AFTER: shown at once
    progress.stop()
    assert said.getvalue().splitlines()[-1].startswith("[vector_add] case 2 of 2: 'late' (")


def test_the_check_time_limit_never_exceeds_a_launch_limit(monkeypatch):
    from grader.checks import CHECK_TIME_LIMIT, check_time_limit

    monkeypatch.delenv("GRADER_CHECK_TIME_LIMIT", raising=False)
    monkeypatch.setenv("GRADER_TIME_LIMIT", "3")
    assert check_time_limit() == 3.0
    monkeypatch.setenv("GRADER_TIME_LIMIT", "60")
    assert check_time_limit() == CHECK_TIME_LIMIT


def _io_checked():
    import grader.exercises  # noqa: F401  (registers every exercise)
    from grader.exercise_rows import REGISTRY
    return [ex for ex in REGISTRY.values() if getattr(ex.io_check, "limits", None)]


@pytest.mark.parametrize("ex", _io_checked(), ids=lambda ex: ex.id)
def test_the_io_case_tells_every_skipped_tile_limit_apart(ex):
    """A kernel that keeps one tile-skipping limit and drops another (causal but not padded, or
    padded but not causal) must read more than the check's slack allows on the io_case."""
    from types import SimpleNamespace
    c = next(c for c in ex.cases if c.name == ex.io_case)
    p = SimpleNamespace(**c.params)
    check, limits = ex.io_check, ex.io_check.limits
    needed = check.needed_bytes(p)
    for dropped in limits:
        wrong = check.needed_bytes(p, **{dropped: False})
        assert wrong > 1.05 * check.slack * needed, (dropped, wrong / needed)


def test_a_launch_of_many_million_threads_gets_time_in_proportion():
    from grader.checks import _thread_factor, get_exercise
    ex = get_exercise("vector_add")
    by_name = {c.name: c for c in ex.cases}
    assert _thread_factor(ex, by_name["one_element"]) == 1.0
    assert _thread_factor(ex, by_name["past_2_24"]) == pytest.approx(65537 * 256 / 2**22)


def test_an_unwritten_tail_is_blamed_on_the_grid_only_when_what_was_written_is_right():
    from grader.judge import generic_diagnosis

    want = np.arange(1.0, 101.0)
    unwritten = np.arange(100) >= 64
    got = np.where(unwritten, np.nan, want)
    assert "stops short" in generic_diagnosis("c", got, want, unwritten, {})
    strided = np.where(unwritten, np.nan, want[(np.arange(100) * 2) % 100])  # a wrong stride: a tail, wrong values
    assert "stops short" not in (generic_diagnosis("c", strided, want, unwritten, {}) or "")


def test_whole_heads_never_written_are_blamed_on_the_head_offset_not_on_a_loop_bound():
    from grader.judge import generic_diagnosis

    rng = np.random.default_rng(0)
    want = rng.standard_normal((2, 2, 70, 8))
    unwritten = np.zeros(want.shape, bool)
    unwritten[1] = True  # batch 1 never written: every batch wrote batch 0's slices
    got = np.where(unwritten, np.nan, want)
    hint = generic_diagnosis("O", got, want, unwritten, {"B": 2, "H": 2})
    assert "2 of the 4 (batch, head) slices of O were never written (O[1, 0], O[1, 1])" in hint
    assert "stops short" not in hint
    unwritten[1, 1, 60:] = False  # part of a slice written: not the head-offset story
    got = np.where(unwritten, np.nan, want)
    assert "slices" not in (generic_diagnosis("O", got, want, unwritten, {"B": 2, "H": 2}) or "")


def test_rows_holding_other_rows_values_are_named_and_a_merely_wrong_output_is_not():
    from grader.judge import generic_diagnosis

    rng = np.random.default_rng(1)
    want = rng.standard_normal((1, 1, 64, 16))
    rows = np.arange(64)
    moved = rows // 16 * 16 + (rows % 16 + 8) % 16  # the halves of each 16-row group trade places
    got = want[..., moved, :]
    none = np.zeros(want.shape, bool)
    hint = generic_diagnosis("O", got, want, none, {"B": 1, "H": 1})
    assert "O[0, 0, 0, :] is what O[0, 0, 8, :] should be" in hint
    noisy = want + 0.1 * rng.standard_normal(want.shape)
    assert "other rows" not in (generic_diagnosis("O", noisy, want, none, {"B": 1, "H": 1}) or "")


def test_a_name_is_kept_only_if_it_fits_every_failing_case_it_applies_to():
    from grader.judge import CaseResult, compose, fit_every_case
    from grader.exercise_rows import case

    a, b = "scale applied twice: multiply once.", "running max starts at 0: initialise m = -INFINITY."

    def failing(name, named, unfit):
        head = f"case '{name}': 5 of 9 elements of O differ."
        return CaseResult(case(name, 1, N=8), False, compose(head, named, None), head=head, named=named, unfit=unfit)

    first, second = failing("one", [a, b], set()), failing("two", [a], {b})
    fit_every_case([first, second])
    assert "Likely mistake: scale applied twice" in first.message and "running max" not in first.message
    lone, other = failing("one", [b], set()), failing("two", [], {b})
    fit_every_case([lone, other])
    assert "Likely mistake: running max starts at 0" in lone.message
    assert "On case 'two', which fails too, the numbers do not fit this mistake" in lone.message


def test_a_hidden_check_takes_the_visible_cases_just_passed_and_reruns_a_failure(monkeypatch):
    import grader.checks
    from grader.course import solution_source

    source = solution_source("flash_fwd_row")
    visible = run_check("flash_fwd_row", source)
    launched = []
    real = grader.checks.run_case
    monkeypatch.setattr(grader.checks, "run_case", lambda ex, compiled, c, *a, **k: launched.append(c.name) or real(
        ex, compiled, c, *a, **k))
    full = run_check("flash_fwd_row", source, include_hidden=True)
    assert full.passed
    assert launched == [r.case.name for r in full.results if r.case.hidden]
    assert [r.message for r in full.results[:len(visible.results)]] == [r.message for r in visible.results]
    launched.clear()
    broken = source.replace("+=", "-=", 1)
    assert broken != source
    assert not run_check("flash_fwd_row", broken).passed
    first = list(launched)
    launched.clear()
    run_check("flash_fwd_row", broken, include_hidden=True)
    assert launched == [r.case.name for r in full.results]  # failures are never kept: every case runs again
    assert first == [r.case.name for r in full.results if not r.case.hidden]


def test_a_notebook_check_says_its_progress_on_stdout_never_stderr(monkeypatch, capsys):
    # nbgrader scores a test cell that wrote to stderr as failed: a slow correct kernel would lose its points.
    import grader.checks
    from grader.course import solution_source

    monkeypatch.setattr(grader.checks, "PROGRESS_AFTER", 0.0)
    grader.checks.check("vector_add", solution_source("vector_add"))
    out, err = capsys.readouterr()
    assert "[vector_add] case 1 of " in out and err == ""

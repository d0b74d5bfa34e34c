"""Every known-wrong kernel must fail its exercise's check with the intended diagnosis, and
every instructor solution must pass all cases (visible and grading-only)."""
from pathlib import Path

import pytest

from grader.checks import REGISTRY, get_exercise, run_check
from grader.course import solution_source

WRONG = Path(__file__).resolve().parents[1] / "wrong"
get_exercise("vector_add")  # register every exercise
WRONG_KERNELS = sorted(WRONG.glob("*/*.cu"))
# Exercises that grade the same kernel as another in a different precision share its wrong kernels.
SAME_KERNEL = {"tc_flash_fwd_bf16_d64": "tc_flash_fwd_d64", "tc_flash_fwd_bf16_d128": "tc_flash_fwd_d128"}
CASES = [(p.parent.name, p) for p in WRONG_KERNELS] + [
    (ex, p) for ex, twin in SAME_KERNEL.items() for p in sorted((WRONG / twin).glob("*.cu"))]


def expectation(path: Path) -> str:
    first = path.read_text().splitlines()[0]
    assert first.startswith("// expect: "), f"{path} must start with '// expect: TEXT'"
    return first.removeprefix("// expect: ").strip()


@pytest.mark.parametrize("exercise, path", CASES, ids=[f"{ex}/{p.stem}" for ex, p in CASES])
def test_wrong_kernel_is_caught_and_named(exercise, path):
    result = run_check(exercise, path.read_text(), include_hidden=True, backend="cpu", seed=2024)
    assert not result.passed, f"{path.name} passed every case of {exercise}"
    messages = "\n".join(r.message for r in result.results if not r.passed)
    assert expectation(path) in messages, messages


@pytest.mark.parametrize("exercise_id", sorted(REGISTRY))
def test_solution_passes_every_case(exercise_id):
    result = run_check(exercise_id, solution_source(exercise_id), include_hidden=True, backend="cpu", seed=99)
    assert result.passed, result.summary() + "\n" + "\n".join(r.message for r in result.results if not r.passed)


def test_every_wrong_kernel_folder_names_an_exercise():
    assert {p.parent.name for p in WRONG_KERNELS} <= set(REGISTRY)


# Expectations that only say *that* something is wrong, not which mistake: a wrong kernel whose
# expected diagnosis is one of these counts as caught but not named.
GENERIC = ("differ", "NaN computed by the kernel", "are NaN computed by the kernel", "never written",
           "were never written")


def test_most_wrong_kernels_are_named():
    """Of the wrong corpus, the share whose expected diagnosis names the mistake (a declared
    Mistake, a fault with its class, a race, a write into an input, an infinity) rather than a
    generic 'differ': at least 85%. (Each is checked against the real message above.)"""
    named = [p for p in WRONG_KERNELS if expectation(p) not in GENERIC]
    share = len(named) / len(WRONG_KERNELS)
    print(f"\n{len(named)} of {len(WRONG_KERNELS)} wrong kernels ({share:.0%}) expect a diagnosis that names the mistake")
    assert share >= 0.85

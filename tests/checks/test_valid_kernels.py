"""Correct kernels in other styles than the solutions (tests/valid/) pass their checks, grading
cases included, whatever the seed: the checks judge results, not the solution's style. The seed
draws the hidden cases' shapes too, as the clean regrade does (grader/autograde/shapes.py).

Each kernel runs with one of SEEDS, in rotation (the kernels of one exercise see different seeds), to
keep CI short; GRADER_VALID_SEEDS=all runs every kernel with every seed."""
import dataclasses
import os
from pathlib import Path

import pytest

from grader.autograde.shapes import draw_cases
from grader.checks import REGISTRY, get_exercise, run_check

VALID = Path(__file__).resolve().parents[1] / "valid"
FILES = sorted(VALID.glob("*/*.cu"))
ALSO = "// also valid for:"  # a first line naming other builds of the same kernel (another d, bf16, causal)


def _exercises(path: Path) -> list[str]:
    first = path.read_text().split("\n", 1)[0]
    return [path.parent.name] + (first[len(ALSO):].split() if first.startswith(ALSO) else [])


KERNELS = [(ex, path) for path in FILES for ex in _exercises(path)]
SEEDS = (1, 77, 20261124)


def test_every_valid_folder_names_an_exercise():
    get_exercise("vector_add")  # registers every module's exercises
    assert KERNELS
    assert not [ex for ex, _ in KERNELS if ex not in REGISTRY]


@pytest.mark.parametrize("exercise,path", KERNELS, ids=[f"{ex}/{p.stem}" for ex, p in KERNELS])
def test_valid_kernel_passes_with_fresh_seeds(exercise, path):
    i = KERNELS.index((exercise, path))
    seeds = SEEDS if os.environ.get("GRADER_VALID_SEEDS") == "all" else (SEEDS[i % len(SEEDS)],)
    ex = get_exercise(exercise)
    for seed in seeds:
        drawn = dataclasses.replace(ex, cases=draw_cases(ex.cases, seed, ex.hidden_sizes))
        result = run_check(drawn, path.read_text(), include_hidden=True, seed=seed)
        assert result.passed, f"seed {seed}: {result.first_failure.message}"

"""Correct kernels in other styles than the solutions (tests/valid/) pass their checks, grading
cases included, whatever the seed: the checks judge results, not the solution's style.

Each kernel runs with one of SEEDS, in rotation (the kernels of one exercise see different seeds), to
keep CI short; GRADER_VALID_SEEDS=all runs every kernel with every seed."""
import os
from pathlib import Path

import pytest

from grader.checks import REGISTRY, get_exercise, run_check

VALID = Path(__file__).resolve().parents[1] / "valid"
KERNELS = sorted(VALID.glob("*/*.cu"))
SEEDS = (1, 77, 20261124)


def test_every_valid_folder_names_an_exercise():
    get_exercise("vector_add")  # registers every module's exercises
    assert KERNELS
    assert not [p.parent.name for p in KERNELS if p.parent.name not in REGISTRY]


@pytest.mark.parametrize("path", KERNELS, ids=[f"{p.parent.name}/{p.stem}" for p in KERNELS])
def test_valid_kernel_passes_with_fresh_seeds(path):
    seeds = SEEDS if os.environ.get("GRADER_VALID_SEEDS") == "all" else (SEEDS[KERNELS.index(path) % len(SEEDS)],)
    for seed in seeds:
        result = run_check(path.parent.name, path.read_text(), include_hidden=True, seed=seed)
        assert result.passed, f"seed {seed}: {result.first_failure.message}"

"""A correct kernel passes, and never comes near failing: every instructor solution and every kernel
of tests/valid/ (correct kernels in other styles: the checks judge results, not the solution's style)
passes its exercise's check, grading cases included, with fresh seeds, and every output stays at
most a third of the tolerance away from the reference (the tolerance rule is in grader/checks.py).
Each seed draws the hidden cases' shapes as the clean regrade does (grader/autograde/shapes.py) and
the values of every case, so the margin covers the shapes and inputs a student can be graded on.

One check per kernel and seed gives both verdicts: the margins come from the check's own launches.
CI runs one seed per kernel; the kernels of one exercise see different seeds. A benchmark run sets
``GRADER_MARGIN_SEEDS=200`` (``-s`` prints the worst ratio per kernel and output;
``GRADER_MARGIN_OUT=file.jsonl`` appends them as records; ``GRADER_MARGIN_BACKEND=gpu`` runs the same
seeds on a GPU through CuPy; benchmarks/margins.py spreads the seeds over processes):

    GRADER_MARGIN_SEEDS=200 .venv/bin/python -m pytest tests/checks/test_correct_kernels.py -s
"""
import dataclasses
import json
import os
from pathlib import Path

import pytest

from grader.autograde.shapes import draw_cases
from grader.checks import REGISTRY, get_exercise, run_check
from grader.course import solution_source

SEEDS = int(os.environ.get("GRADER_MARGIN_SEEDS", "1"))
BASE = int(os.environ.get("GRADER_MARGIN_BASE", "31337"))
BACKEND = os.environ.get("GRADER_MARGIN_BACKEND", "cpu")
LIMIT = 1 / 3  # a correct kernel's error stays within a third of the tolerance
get_exercise("vector_add")  # register every exercise
VALID = Path(__file__).resolve().parents[1] / "valid"
ALSO = "// also valid for:"  # a first line naming other builds of the same kernel (another d, bf16, causal)


def _valid_kernels():
    for path in sorted(VALID.glob("*/*.cu")):
        first = path.read_text().split("\n", 1)[0]
        for ex in [path.parent.name] + (first[len(ALSO):].split() if first.startswith(ALSO) else []):
            yield ex, path


KERNELS = [(ex, "solution") for ex in sorted(REGISTRY)] + list(_valid_kernels())


def _nth_of_its_exercise(exercise_id, kernel) -> int:
    """0 for the solution, 1, 2, ... for the valid kernels of the same exercise: their seeds differ."""
    return [k for ex, k in KERNELS if ex == exercise_id].index(kernel)


def test_every_valid_folder_names_an_exercise():
    assert [ex for ex, k in KERNELS if k != "solution"]
    assert not [ex for ex, _ in KERNELS if ex not in REGISTRY]


def _with_seed(ex, seed: int):
    """The exercise's cases with the hidden shapes drawn from ``seed`` and every case's values too."""
    cases = [c if c.hidden else dataclasses.replace(c, seed=(seed + 7919 * i) % 2**31)
             for i, c in enumerate(draw_cases(ex.cases, seed, ex.hidden_sizes))]
    return dataclasses.replace(ex, cases=cases)


@pytest.mark.parametrize("exercise_id, kernel", KERNELS,
                         ids=[f"{ex}/{k if k == 'solution' else k.stem}" for ex, k in KERNELS])
def test_correct_kernel_passes_far_from_the_tolerance(exercise_id, kernel):
    ex = get_exercise(exercise_id)
    source = solution_source(exercise_id) if kernel == "solution" else kernel.read_text()
    first = SEEDS * _nth_of_its_exercise(exercise_id, kernel)
    worst = {}
    for s in range(first, first + SEEDS):
        seed = (BASE + 1000003 * s) % 2**31
        result = run_check(_with_seed(ex, seed), source, include_hidden=True, backend=BACKEND, seed=seed)
        assert result.passed, f"seed {seed}: {result.first_failure.message}"
        for i, r in enumerate(result.results):  # case i's values came from seed + 7919 i (_with_seed, run_check)
            for name, ratio in r.margins.items():
                if ratio >= worst.get(name, (-1.0,))[0]:
                    worst[name] = (ratio, r.case.describe(with_seed=False), (seed + 7919 * i) % 2**31)
    who = "solution" if kernel == "solution" else f"valid/{exercise_id}/{kernel.name}"
    print(f"\n{exercise_id} {who} ({BACKEND}, {SEEDS} seeds x {len(ex.cases)} cases): " + ", ".join(
        f"{n} worst {r:.3g} of the tolerance ({cn}, seed {sd})" for n, (r, cn, sd) in worst.items()))
    if os.environ.get("GRADER_MARGIN_OUT"):
        with open(os.environ["GRADER_MARGIN_OUT"], "a") as f:
            for name, (ratio, cname, seed) in worst.items():
                f.write(json.dumps(dict(exercise=exercise_id, kernel=who, output=name, backend=BACKEND, seeds=SEEDS,
                                        base=BASE, worst=ratio, case=cname, seed=seed)) + "\n")
    assert worst, f"{exercise_id}: no case reported a margin"
    for name, (ratio, cname, seed) in worst.items():
        assert ratio <= LIMIT, (f"{exercise_id}: the {who}'s {name} reaches {ratio:.3g} of the tolerance on case "
                                f"{cname} with seed {seed}: a correct kernel must stay within {LIMIT:.2g}")

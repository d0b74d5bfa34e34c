"""A correct kernel never fails: every solution and every kernel of tests/valid/, over fresh seeds
for every case, stays at most a third of the tolerance away from the reference (the tolerance rule
is in grader/checks.py). Each seed draws the hidden cases' shapes as the clean regrade does
(grader/autograde/shapes.py), so the margin covers the shapes a student can be graded on.

CI runs one seed per kernel on the emulator (its hidden shapes drawn as a grading seed draws them;
test_solution_passes_every_case draws another set for every solution); a benchmark run sets
``GRADER_MARGIN_SEEDS=200``
(``-s`` prints the worst ratio per kernel and output; ``GRADER_MARGIN_OUT=file.jsonl`` appends them
as records; ``GRADER_MARGIN_BACKEND=gpu`` runs the same seeds on a GPU through CuPy):

    GRADER_MARGIN_SEEDS=200 .venv/bin/python -m pytest tests/checks/test_margins.py -s
"""
import dataclasses
import json
import os
from pathlib import Path

import pytest

from grader.autograde.shapes import draw_cases
from grader.checks import REGISTRY, case_margins, get_exercise
from grader.course import solution_source
from grader.kernel import RawKernel

SEEDS = int(os.environ.get("GRADER_MARGIN_SEEDS", "1"))
BASE = int(os.environ.get("GRADER_MARGIN_BASE", "31337"))
BACKEND = os.environ.get("GRADER_MARGIN_BACKEND", "cpu")
LIMIT = 1 / 3  # a correct kernel's error stays within a third of the tolerance
get_exercise("vector_add")  # register every exercise
VALID = Path(__file__).resolve().parents[1] / "valid"
ALSO = "// also valid for:"


def _valid_kernels():
    for path in sorted(VALID.glob("*/*.cu")):
        first = path.read_text().split("\n", 1)[0]
        for ex in [path.parent.name] + (first[len(ALSO):].split() if first.startswith(ALSO) else []):
            yield ex, path


KERNELS = [(ex, "solution") for ex in sorted(REGISTRY)] + [(ex, p) for ex, p in _valid_kernels()]


@pytest.mark.parametrize("exercise_id, kernel", KERNELS,
                         ids=[f"{ex}/{k if k == 'solution' else k.stem}" for ex, k in KERNELS])
def test_correct_kernel_stays_far_from_the_tolerance(exercise_id, kernel):
    ex = get_exercise(exercise_id)
    source = solution_source(exercise_id) if kernel == "solution" else kernel.read_text()
    compiled = RawKernel(source, ex.kernel, options=ex.options, backend=BACKEND).compile()
    worst = {}
    for s in range(SEEDS):
        shape_seed = (BASE + 1000003 * s) % 2**31
        for i, c in enumerate(draw_cases(ex.cases, shape_seed, ex.hidden_sizes)):
            seed = (BASE + 1000003 * s + 7919 * i) % 2**31
            for name, ratio in case_margins(ex, compiled, c, seed, BACKEND).items():
                if ratio >= worst.get(name, (-1.0,))[0]:
                    worst[name] = (ratio, c.describe(with_seed=False), seed)
    who = "solution" if kernel == "solution" else f"valid/{exercise_id}/{kernel.name}"
    print(f"\n{exercise_id} {who} ({BACKEND}, {SEEDS} seeds x {len(ex.cases)} cases): " + ", ".join(
        f"{n} worst {r:.3g} of the tolerance ({cn}, seed {sd})" for n, (r, cn, sd) in worst.items()))
    if os.environ.get("GRADER_MARGIN_OUT"):
        with open(os.environ["GRADER_MARGIN_OUT"], "a") as f:
            for name, (ratio, cname, seed) in worst.items():
                f.write(json.dumps(dict(exercise=exercise_id, kernel=who, output=name, backend=BACKEND, seeds=SEEDS,
                                        base=BASE, worst=ratio, case=cname, seed=seed)) + "\n")
    for name, (ratio, cname, seed) in worst.items():
        assert ratio <= LIMIT, (f"{exercise_id}: the {who}'s {name} reaches {ratio:.3g} of the tolerance on case "
                                f"{cname} with seed {seed}: a correct kernel must stay within {LIMIT:.2g}")

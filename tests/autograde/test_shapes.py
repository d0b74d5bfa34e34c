"""The hidden-case shapes the clean regrade draws per student (grader/autograde/shapes.py): each
exercise names the sizes it lets vary and their unit (``hidden_sizes``); every drawn size keeps the
class its declared value was chosen for, and nothing else moves (a compile-time HEAD_DIM, counts,
floats, visible cases). That a correct kernel passes on drawn shapes is checked with every
solution in tests/checks/test_wrong_kernels.py."""
import pytest

from grader.autograde.engine import derive_seed
from grader.autograde.shapes import draw_cases, draw_length
from grader.checks import REGISTRY, get_exercise
from grader.exercise_rows import TRITON_REGISTRY

get_exercise("vector_add")  # registers every exercise
EXERCISES = sorted(REGISTRY | TRITON_REGISTRY)


def size_class(v, unit):
    if v == 1:
        return "one"
    if v < unit:
        return ("below", v % 2)
    r = v % unit
    if r == 0:
        return "multiple"
    if unit > 2 and r in (1, unit - 1):
        return ("one off", r)
    return ("ragged", v % 2)


@pytest.mark.parametrize("exercise_id", EXERCISES)
def test_drawn_sizes_keep_their_class_and_nothing_else_moves(exercise_id):
    ex = get_exercise(exercise_id)
    sizes = ex.hidden_sizes
    assert sizes, f"{exercise_id} declares no hidden_sizes: its hidden shapes would ship in the package as graded"
    assert "d" not in sizes or "-DHEAD_DIM" not in " ".join(getattr(ex, "options", ())), "a compiled d cannot vary"
    moved = set()
    for seed in range(20):
        drawn = draw_cases(ex.cases, derive_seed(seed, "student", exercise_id, "shapes"), sizes)
        assert drawn == draw_cases(ex.cases, derive_seed(seed, "student", exercise_id, "shapes"), sizes)
        for c, got in zip(ex.cases, drawn):
            if not c.hidden:
                assert got == c
                continue
            for key, v in c.params.items():
                new = got.params[key]
                if key == "lengths" and "N" in sizes:
                    assert len(new) == len(v) and all(0 <= x <= got.params["N"] for x in new)
                    assert [x == 0 for x in new] == [x == 0 for x in v]
                    assert [x == got.params["N"] for x in new] == [x == c.params["N"] for x in v]
                elif key not in sizes or isinstance(v, (bool, float)) or not isinstance(v, int):
                    assert new == v, (c.name, key)
                elif key == "d":
                    assert (new % 8 == 0) == (v % 8 == 0) and new % 2 == v % 2 and (v != 128 or new == 128)
                else:
                    assert size_class(new, sizes[key]) == size_class(v, sizes[key]), (c.name, key, v, new)
                moved |= {key} if new != v else set()
    varying = {k for c in ex.cases if c.hidden for k, v in c.params.items() if k in sizes and isinstance(v, int) and v > 1}
    assert not varying or moved, f"{exercise_id}: no hidden size ever moved over 20 seeds"


@pytest.mark.parametrize("v, unit", [(257, 64), (191, 64), (127, 128), (1237, 256), (1024, 256), (40, 64), (4097, 4),
                                     (2050, 4), (72, 8), (300, 64)])
def test_a_drawn_length_stays_in_its_class(v, unit):
    import random
    rng = random.Random(5)
    got = {draw_length(v, rng, 1, unit) for _ in range(50)}
    assert len(got) > 1 and all(size_class(x, unit) == size_class(v, unit) for x in got), got
    assert all(0.6 * v - unit <= x <= 1.4 * v + unit for x in got)

import pytest

from grader.errors import LaunchConfigError
from grader.launch import check_launch, dims

LIMIT = 48 * 1024


def test_dims_normalise_ints_and_tuples():
    assert dims(7, "grid", "k") == (7, 1, 1)
    assert dims((3, 2), "grid", "k") == (3, 2, 1)
    assert dims([1, 2, 3], "block", "k") == (1, 2, 3)


@pytest.mark.parametrize(
    "grid, block, smem, message",
    [
        (4.0, 256, 0, "not a whole number. Use ceil_div"),
        (0, 256, 0, "dimension of 0"),
        (1, (32, 33), 0, "has 1056 threads; a block holds at most 1024"),
        (1, (1, 1, 65), 0, "65 threads along z, over the limit of 64"),
        ((1, 70000), 32, 0, "70000 blocks along y"),
        (1, 32, 49 * 1024, "Set kernel.max_dynamic_shared_size_bytes = 50176"),
        (1, 32, 300 * 1024, "227 KB"),
        (1, 32, -1, "non-negative"),
        ((1, 2, 3, 4), 32, 0, "tuple of 1-3 ints"),
    ],
)
def test_bad_launches_are_explained(grid, block, smem, message):
    with pytest.raises(LaunchConfigError) as err:
        check_launch("k", grid, block, smem, LIMIT)
    assert message in str(err.value)


def test_opt_in_raises_the_dynamic_limit():
    assert check_launch("k", 1, 32, 100 * 1024, 100 * 1024) == ((1, 1, 1), (32, 1, 1), 102400)

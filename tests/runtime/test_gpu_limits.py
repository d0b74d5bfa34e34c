"""grader.gpu's launch checks that need no GPU: the compiled build's own limits, read from its
attributes, turned into a message that says what to change."""
from types import SimpleNamespace

import pytest

from grader.errors import LaunchConfigError
from grader.gpu import GpuKernel


def _build(max_threads: int, regs: int) -> GpuKernel:
    kernel = object.__new__(GpuKernel)  # no compilation: the attributes are all the check reads
    kernel.name = "big"
    kernel._kernel = SimpleNamespace(attributes={"max_threads_per_block": max_threads, "num_regs": regs})
    return kernel


def test_a_block_over_what_the_registers_allow_names_the_arithmetic_and_the_remedy():
    build = _build(max_threads=384, regs=168)
    build.check_block((384, 1, 1))
    with pytest.raises(LaunchConfigError) as err:
        build.check_block((256, 2, 1))
    message = str(err.value)
    assert message.startswith("big: block(256, 2, 1) has 512 threads, but this build can run at most 384 per block")
    assert "168 registers per thread" in message and "168 x 512 = 86016" in message
    assert "__launch_bounds__(512)" in message

"""benchmarks/bench_11_capstone.py's ablation rows are edits of module 11's solution (module 11's reading
tables them): each edit must still apply to the solution, once, and the edited kernel must still compile."""
import pytest
from repo_scripts import load_script

from grader.capstone import build
from grader.checks import REGISTRY
from grader.course import solution_source
from grader.wrong_corpus import replace_each_once

bench = load_script("benchmarks/bench_11_capstone.py", "bench_11_capstone_under_test")
SOLUTION = solution_source("capstone_fwd_d64")


@pytest.mark.parametrize("change", list(bench.ABLATIONS))
def test_every_ablation_is_an_edit_of_the_solution_that_compiles(change):
    source = replace_each_once(SOLUTION, bench.ABLATIONS[change], change)
    assert source != SOLUTION
    nvrtc = pytest.importorskip("grader.nvrtc")
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    # the build with the most registers at stake: d = 128, 32 rows per warp, Q from shared memory
    ex_id = build("fp16", 128, False, dict(WARPS=4, WARP_ROWS=32, TILE=64, STAGES=2, Q_IN_REGS=0, LAZY_RESCALE=1))
    nvrtc.compile_check(source, archs=("sm_90",), options=REGISTRY[ex_id].options)


backward = load_script("benchmarks/bench_11_backward.py", "bench_11_backward_under_test")
DKDV = solution_source("capstone_bwd_dkdv_d64")


@pytest.mark.parametrize("change", list(backward.ABLATIONS))
def test_every_backward_ablation_is_an_edit_of_the_fused_solution_that_compiles(change):
    source = replace_each_once(DKDV, backward.ABLATIONS[change], change)
    assert source != DKDV
    nvrtc = pytest.importorskip("grader.nvrtc")
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    nvrtc.compile_check(source, archs=("sm_90",), options=REGISTRY["capstone_bwd_dkdv_fused_bf16_causal_d128"].options)

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


def test_a_record_keeps_each_baselines_repeats_and_the_reading_shows_their_ratios():
    from grader.benchmark import BenchReport, Measurement, summarize

    def timed(name, role, backend, medians):
        return Measurement(name, "fp16", role, 1e9, 1e6, backend=backend, repeats=[summarize([m]) for m in medians])
    report = BenchReport("capstone_fwd_d64", dict(B=4, H=16, S=4096, d=64), "fp16", False, "GPU", check_passed=True)
    report.kernel = timed("capstone", "kernel", None, [1.0, 1.1, 1.0, 1.2])
    report.baselines = [timed("flash", "baseline", "FLASH_ATTENTION", [1.1, 1.1, 1.3, 1.2]),
                        timed("cudnn", "baseline", "CUDNN_ATTENTION", [0.6, 0.7, 0.6, 0.6]),
                        Measurement("efficient", "fp16", "baseline", 1e9, 1e6, backend="EFFICIENT_ATTENTION",
                                    error="refused")]
    rec = bench.flash_record(report, "capstone_fwd_d64")
    assert rec["repeat_ms"] == [1.0, 1.1, 1.0, 1.2] and rec["ratio"] == 1.095  # medians: 1.15 over 1.05
    assert rec["baseline_repeat_ms"] == [1.1, 1.1, 1.3, 1.2] and rec["cudnn_repeat_ms"] == [0.6, 0.7, 0.6, 0.6]
    figstyle = load_script("modules/figstyle.py", "figstyle_under_test")
    assert figstyle.per_round(rec, "baseline_repeat_ms") == "1.00–1.30"  # round by round: 1.1, 1.0, 1.3, 1.0
    assert figstyle.per_round(rec, "cudnn_repeat_ms") == "0.50–0.64"
    assert figstyle.per_round({"repeat_ms": [1.0]}, "baseline_repeat_ms") == "—"
    head, rows = ["a", "b"], [["1", "2"], ["3", "4"]]
    figstyle.add_per_round(head, rows, [rec, {}], "baseline_repeat_ms", "per round", at=1)
    assert head == ["a", "per round", "b"] and rows == [["1", "1.00–1.30", "2"], ["3", "—", "4"]]
    figstyle.add_per_round(head, rows, [{}, {}], "baseline_repeat_ms", "again")  # no record has them: no column
    assert head == ["a", "per round", "b"]

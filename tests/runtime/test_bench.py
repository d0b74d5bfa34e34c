"""The benchmark harness: refusal on the emulator, declared work, statistics, the adaptive run
count, evidence records. The last tests need a GPU and run only where CuPy sees one."""
import json

import pytest

import grader
from grader.__main__ import main
from grader.benchmark import (IDENTITY, RECORD_KEYS, BenchReport, Measurement, in_turn, merge_records, run_to_run_spread,
                              sample, summarize)
from grader.benchspec import SPECS, get_spec, parse_shape
from grader.course import solution_source
from grader.errors import BackendUnavailableError, CourseError
from repo_scripts import load_script

HAS_GPU = grader.gpu_status()[0]


def test_bench_refuses_on_the_emulator(on_emulator):
    with pytest.raises(BackendUnavailableError, match=r"does not model .* python -m grader profile flash_fwd_row file\.cu"):
        grader.bench("flash_fwd_row", solution_source("flash_fwd_row"))


def test_bench_cli_on_the_emulator_prints_one_sentence_and_fails(on_emulator, tmp_path, capsys):
    path = tmp_path / "mine.cu"
    path.write_text(solution_source("matmul_tiled"))
    assert main(["bench", "matmul_tiled", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("error: the CPU emulator does not model a GPU's speed")
    assert "python -m grader profile matmul_tiled file.cu" in err
    assert err.count("\n") == 1 and "Traceback" not in err


def _work(ex_id, **shape):
    spec = get_spec(ex_id)
    p = spec.params(parse_shape(shape, spec))
    return (spec.flops(p) if spec.flops else None), spec.bytes(p, 4)


def test_attention_forward_work_at_the_reference_shape():
    flops, nbytes = _work("flash_fwd_row")  # B=4, H=16, S=4096, d=64
    assert flops == 4 * 4 * 16 * 4096**2 * 64 == 274_877_906_944
    assert nbytes == 4 * (4 * 4 * 16 * 4096 * 64) + 4 * (4 * 16 * 4096) == 269_484_032  # Q, K, V, O + L
    assert _work("flash_fwd_fa2", d=128) == (2 * flops, 4 * (4 * 4 * 16 * 4096 * 128) + 4 * 4 * 16 * 4096)
    assert _work("flash_fwd_fa1") == (flops, nbytes)  # its m/l scratch is not minimal traffic
    assert _work("flash_fwd_causal") == (flops / 2, nbytes)
    assert _work("flash_fwd_padded") == (flops, nbytes + 4 * 4)  # nothing padded, plus key_lengths


def test_backward_and_matmul_work():
    heads_n2d = 4 * 16 * 4096**2 * 64
    tensor, stat = 4 * 4 * 16 * 4096 * 64, 4 * 4 * 16 * 4096
    assert _work("flash_bwd_dkdv") == (8 * heads_n2d, 6 * tensor + 2 * stat)
    assert _work("flash_bwd_dq") == (6 * heads_n2d, 5 * tensor + 2 * stat)
    assert _work("flash_bwd_atomic") == (10 * heads_n2d, 7 * tensor + 2 * stat)
    assert _work("flash_bwd_dkdv_causal") == (4 * heads_n2d, 6 * tensor + 2 * stat)
    assert _work("flash_bwd_preprocess") == (2 * 4 * 16 * 4096 * 64, 2 * tensor + stat)
    assert _work("matmul_tiled") == (2 * 4096**3, 3 * 4 * 4096**2)
    assert _work("matmul_naive", M=128, N=256, K=64) == (2 * 128 * 256 * 64, 4 * (128 * 64 + 64 * 256 + 128 * 256))
    assert _work("qk_scores_tiled", S=1024, d=64) == (2 * 1024**2 * 64, 4 * (2 * 1024 * 64 + 1024**2))
    assert _work("online_softmax_rows", rows=10, cols=20) == (None, 2 * 4 * 200)
    assert get_spec("matmul_tiled").bytes(get_spec("matmul_tiled").params({"M": 2, "N": 2, "K": 2}), 2) == 2 * 12


def test_every_declared_benchmark_is_an_exercise_whose_launch_takes_the_params():
    from types import SimpleNamespace

    from grader.checks import get_exercise

    for ex_id, spec in SPECS.items():
        ex = get_exercise(ex_id)
        p = spec.params(spec.shape)
        names = set(ex.outputs) | set(ex.scratch) | {"A", "B", "Q", "K", "V", "x", "dO", "O", "L", "D", "key_lengths"}
        args = ex.args(p, SimpleNamespace(**{n: n for n in names}))
        assert len(args) == len(grader.RawKernel(solution_source(ex_id), ex.kernel).signature.params), ex_id
        ex.grid(p), ex.block(p), ex.shared_mem(p)


def test_shapes_parse_and_refuse_with_the_keys_they_take():
    spec = get_spec("flash_fwd_row")
    assert parse_shape("S=1024, d=128", spec) == {"B": 4, "H": 16, "S": 1024, "d": 128}
    assert parse_shape({"B": 1}, spec)["B"] == 1
    with pytest.raises(CourseError, match="takes B=INT, H=INT, S=INT, d=INT"):
        parse_shape("N=5", spec)
    with pytest.raises(CourseError, match="whole number"):
        parse_shape("S=4k", spec)
    assert "up to 128" in spec.unsupported({"d": 256})
    with pytest.raises(CourseError, match="no benchmark is declared for 'vector_add'"):
        get_spec("vector_add")


def test_statistics_of_given_samples():
    s = summarize([5, 1, 4, 2, 3, 10, 6, 7, 9, 8])
    assert (s.median, s.min, s.runs) == (5.5, 1.0, 10)
    assert (s.p10, s.p90) == pytest.approx((1.9, 9.1))
    assert s.spread == pytest.approx(7.2 / 5.5)
    assert summarize([2.0, 2.0, 2.0]).spread == 0.0
    assert run_to_run_spread([10.0, 10.2, 9.9]) == pytest.approx(0.3 / 10.0)
    assert run_to_run_spread([3.0]) == 0.0
    with pytest.raises(ValueError):
        summarize([])


def test_repeats_alternate_their_order():
    assert list(in_turn(["capstone", "flash", "cudnn"], 4)) == [
        "capstone", "flash", "cudnn", "cudnn", "flash", "capstone", "capstone", "flash", "cudnn", "cudnn", "flash", "capstone"]
    assert list(in_turn(["capstone"], 3)) == ["capstone"] * 3 and list(in_turn(["a", "b"], 0)) == []


class FakeTimer:
    """Runs that take ``ms(i)`` for the i-th run; remembers the batch sizes asked for."""

    def __init__(self, ms):
        self.ms, self.batches, self.done = ms, [], 0

    def __call__(self, n):
        self.batches.append(n)
        out = [self.ms(self.done + i) for i in range(n)]
        self.done += n
        return out


def test_fast_kernel_runs_until_enough_timed_work():
    t = FakeTimer(lambda i: 2.0)
    got = sample(t, min_runs=10, min_ms=100, max_runs=10_000, max_ms=5000)
    assert len(got) == 50 and t.batches == [1, 49]


def test_few_runs_are_enough_when_each_is_long():
    t = FakeTimer(lambda i: 30.0)
    assert len(sample(t, min_runs=10, min_ms=100, max_runs=10_000, max_ms=5000)) == 10


def test_slow_kernel_stops_at_the_time_budget_but_not_below_the_floor():
    t = FakeTimer(lambda i: 1000.0)
    assert len(sample(t, min_runs=10, min_ms=200, max_runs=10_000, max_ms=5000, floor=3)) == 5
    t = FakeTimer(lambda i: 4000.0)
    assert len(sample(t, min_runs=10, min_ms=200, max_runs=10_000, max_ms=5000, floor=3)) == 3


def test_tiny_kernel_is_capped_at_max_runs():
    t = FakeTimer(lambda i: 0.001)
    assert len(sample(t, min_runs=10, min_ms=200, max_runs=1000, max_ms=5000)) == 1000


def test_run_count_follows_the_median_after_a_slow_first_run():
    t = FakeTimer(lambda i: 50.0 if i == 0 else 1.0)
    got = sample(t, min_runs=5, min_ms=20, max_runs=1000, max_ms=5000)
    assert len(got) == 5 and sum(got) >= 20  # the slow first run already covers min_ms


def _report(**over):
    k = Measurement("flash_fwd_row", "fp32", "kernel", 2.0e11, 2.0e8, repeats=[summarize([100.0, 101.0])] * 3)
    sdpa = Measurement("torch SDPA fp32 EFFICIENT_ATTENTION", "fp32", "baseline", 2.0e11, 2.0e8,
                       backend="EFFICIENT_ATTENTION", repeats=[summarize([5.0])])
    flash = Measurement("torch SDPA fp16 FLASH_ATTENTION", "fp16", "reference", 2.0e11, 1.0e8,
                        backend="FLASH_ATTENTION", repeats=[summarize([0.5])])
    refused = Measurement("torch SDPA fp32 FLASH_ATTENTION", "fp32", "baseline", 2.0e11, 2.0e8,
                          backend="FLASH_ATTENTION", error="fp32 not supported")
    fields = dict(exercise="flash_fwd_row", shape={"B": 4, "H": 16, "S": 4096, "d": 64}, dtype="fp32", causal=False,
                  device="NVIDIA H100 80GB HBM3", check_passed=True, kernel=k, baselines=[refused, sdpa, flash])
    return BenchReport(**(fields | over))


def test_record_has_the_evidence_keys_and_values():
    rec = _report().record()
    assert list(rec)[:len(RECORD_KEYS)] == list(RECORD_KEYS)
    assert rec["kernel"] == "flash_fwd_row" and rec["dtype"] == "fp32" and rec["causal"] is False
    assert (rec["B"], rec["H"], rec["S"], rec["d"]) == (4, 16, 4096, 64)
    assert rec["ms"] == 100.5 and rec["tflops"] == pytest.approx(2.0e11 / 100.5 / 1e9, rel=1e-3)
    assert rec["baseline"] == "torch SDPA fp32 EFFICIENT_ATTENTION" and rec["baseline_tflops"] == 40.0
    assert rec["ratio"] == pytest.approx(5.0 / 100.5, rel=1e-3)
    assert rec["sol_baseline"] == "torch SDPA fp16 FLASH_ATTENTION" and rec["sol_ratio"] == pytest.approx(0.5 / 100.5, rel=1e-3)
    assert rec["baseline_backend"] == "EFFICIENT_ATTENTION" and rec["run_to_run"] == 0.0 and rec["runs"] == 6
    json.dumps(rec)
    table = _report().table()
    assert "flash_fwd_row (yours)" in table and "[speed of light]" in table and "did not run (fp32 not supported)" in table


def test_a_failed_check_is_reported_not_timed():
    report = _report(check_passed=False, check_message="case 'tiny': 3 of 4 elements differ.", kernel=None, baselines=[])
    assert "not timed: the kernel fails its check" in report.table()
    with pytest.raises(CourseError, match="was not timed"):
        report.record()


def test_matmul_records_leave_attention_fields_empty_and_keep_their_own():
    k = Measurement("matmul_tiled", "fp32", "kernel", 2 * 64.0**3, 1.0, repeats=[summarize([1.0])])
    rec = _report(exercise="matmul_tiled", shape={"M": 64, "N": 64, "K": 64}, kernel=k, baselines=[]).record()
    assert (rec["B"], rec["H"], rec["S"], rec["d"], rec["baseline"], rec["ratio"]) == (None,) * 6
    assert (rec["M"], rec["N"], rec["K"]) == (64, 64, 64)


def test_merge_replaces_same_kernel_and_shape_and_keeps_everything_else(tmp_path):
    path = tmp_path / "gpu_evidence.json"
    old = {k: None for k in RECORD_KEYS} | {"kernel": "flash_fwd_row", "dtype": "fp32", "d": 64, "causal": False,
                                             "B": 4, "H": 16, "S": 4096, "ms": 140.0}
    other = old | {"d": 128, "ms": 300.0}
    path.write_text(json.dumps({"device": {"name": "H100"}, "bench": [old, other], "timings": {"x": [1, 2]}}, indent=1))
    new = old | {"ms": 120.0}
    causal = old | {"kernel": "flash_fwd_causal", "causal": True, "ms": 70.0}
    merge_records(path, [new, causal])
    data = json.loads(path.read_text())
    assert list(data) == ["device", "bench", "timings"]
    assert data["device"] == {"name": "H100"} and data["timings"] == {"x": [1, 2]}
    assert [r["ms"] for r in data["bench"]] == [120.0, 300.0, 70.0]
    assert [tuple(r[k] for k in IDENTITY)[:2] for r in data["bench"]][2] == ("flash_fwd_causal", "fp32")
    assert not path.read_text().endswith("\n")  # the file's own ending is kept


def test_merge_tells_matmul_sizes_apart_and_creates_the_file(tmp_path):
    path = tmp_path / "new.json"
    base = {k: None for k in RECORD_KEYS} | {"kernel": "matmul_tiled", "dtype": "fp32", "causal": False}
    merge_records(path, [base | {"M": 1024, "N": 1024, "K": 1024}, base | {"M": 4096, "N": 4096, "K": 4096}])
    merge_records(path, [base | {"M": 4096, "N": 4096, "K": 4096, "ms": 1.0}])
    data = json.loads(path.read_text())
    assert list(data) == ["bench"] and [r.get("ms") for r in data["bench"]] == [None, 1.0]


def test_a_refused_sdpa_backend_keeps_pytorchs_reason_only():
    from grader.benchmark import _why_refused

    warned = ["Flash attention kernel not used because: (Triggered internally at /a/sdp_utils.cpp:988.)",
              "Expected query, key and value to all be of dtype: {Half, BFloat16}. Got Query dtype: float "
              "instead. (Triggered internally at /a/sdp_utils_cpp.h:91.)",
              "cuDNN attention has been runtime disabled. (Triggered internally at /a/sdp_utils.cpp:706.)",
              "No available kernel. Aborting execution."]
    assert _why_refused(warned) == ("Expected query, key and value to all be of dtype: {Half, BFloat16}. "
                                    "Got Query dtype: float instead.; No available kernel. Aborting execution.")


# --------------------------------------------------------------------------- the precision a kernel takes

TYPEDEF_KERNEL = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#ifndef ELEM_BF16
#define ELEM_BF16 0
#endif
// typedef float elem;   (a comment: not the type)
/* #if ELEM_BF16
typedef double elem;
#endif */
#if ELEM_BF16 && !defined(WIDE)
typedef __nv_bfloat16 elem;
#elif defined(WIDE)
using elem = float;
#else
typedef __half elem;
#endif
#define TENSOR const elem
extern "C" __global__ void k(int n, TENSOR* Q, elem* O, float* L) {}
"""


@pytest.mark.parametrize("options, dtype", [
    ((), "fp16"),
    (("-DELEM_BF16=1",), "bf16"),
    (("-DELEM_BF16",), "bf16"),
    (("-DELEM_BF16=0",), "fp16"),
    (("-DELEM_BF16=1", "-DWIDE"), "fp32"),
    (("-DELEM_BF16=1", "-UELEM_BF16"), "fp16"),
])
def test_a_typedef_element_type_is_read_under_the_compile_options(options, dtype):
    from grader.benchmark import source_dtype

    assert source_dtype(TYPEDEF_KERNEL, "k", options) == dtype


def test_a_pointer_type_the_source_does_not_define_is_not_guessed():
    from grader.benchmark import source_dtype

    unknown = "#include <x.h>\nextern \"C\" __global__ void k(const vec_t* Q, float* L) {}"
    assert source_dtype(unknown, "k") is None  # not fp32 from L: Q comes first
    ambiguous = "typedef __half e;\nnamespace a { typedef float e; }\nextern \"C\" __global__ void k(e* Q) {}"
    assert source_dtype(ambiguous, "k") is None
    assert source_dtype("extern \"C\" __global__ void k(int n, float* x) {}", "k") == "fp32"


def test_the_course_tensor_core_rows_are_benchmarked_in_their_builds_precision():
    from grader.benchmark import kernel_dtype
    from grader.checks import get_exercise

    source = solution_source("tc_flash_fwd_d64")  # elem is a typedef chosen by -DELEM_BF16
    for ex_id, dtype in [("tc_flash_fwd_d128", "fp16"), ("tc_flash_fwd_causal_d64", "fp16"),
                         ("tc_flash_fwd_bf16_d64", "bf16"), ("tc_flash_fwd_bf16_causal_d128", "bf16")]:
        assert kernel_dtype(source, get_exercise(ex_id)) == dtype
        assert kernel_dtype(source, get_exercise(ex_id), dtype) == dtype
    with pytest.raises(CourseError, match=r"tc_flash_fwd built with -DHEAD_DIM=64 -DELEM_BF16=1 takes bf16 tensors .* "
                                          r"--dtype bf16"):
        kernel_dtype(source, get_exercise("tc_flash_fwd_bf16_d64"), "fp16")


def test_a_build_for_one_head_dimension_is_benchmarked_at_it():
    spec = get_spec("tc_flash_fwd_causal_d128")
    assert spec.causal and spec.shape["d"] == 128
    assert _work("tc_flash_fwd_causal_d128") == (_work("tc_flash_fwd_d128")[0] / 2, _work("tc_flash_fwd_d128")[1])
    assert spec.unsupported(parse_shape("S=1024", spec)) is None
    assert spec.unsupported(parse_shape("d=64", spec)) == ("tc_flash_fwd_causal_d128 is built for d=128 (a "
                                                           "compile-time constant), not d=64")
    assert get_spec("flash_fwd_row").unsupported(parse_shape("d=128", get_spec("flash_fwd_row"))) is None


def test_a_dry_run_on_the_emulator_checks_and_launches_at_the_shape(on_emulator):
    source = solution_source("tc_flash_fwd_bf16_causal_d64")
    report = grader.bench("tc_flash_fwd_bf16_causal_d64", source, shape="B=1,H=2,S=130", dry_run=True)
    assert report.check_passed and report.kernel is None and report.dtype == "bf16" and report.causal
    assert report.shape == {"B": 1, "H": 2, "S": 130, "d": 64} and "dry run" in report.table()
    # Rows past 160 are never written: the cases (N <= 127) pass, the launch at M = 200 does not.
    short = solution_source("matmul_naive").replace("if (row < M && col < N)", "if (row < M && col < N && row < 160)")
    report = grader.bench("matmul_naive", short, shape="M=200,N=16,K=8", dry_run=True)
    assert not report.check_passed
    assert report.check_message == "dry run: the launch left 640 of 3200 elements of C unwritten"


def _bench_08():
    return load_script("benchmarks/bench_08_tensor_cores.py", "bench_08")


def test_module_08_benchmark_rehearses_on_the_emulator(on_emulator, capsys):
    bench_08 = _bench_08()
    assert [bench_08.flash_exercise(*c) for c in bench_08.FLASH] == [
        "tc_flash_fwd_d64", "tc_flash_fwd_causal_d64", "tc_flash_fwd_d128", "tc_flash_fwd_causal_d128",
        "tc_flash_fwd_bf16_d64", "tc_flash_fwd_bf16_causal_d64", "tc_flash_fwd_bf16_d128",
        "tc_flash_fwd_bf16_causal_d128"]
    assert bench_08.main(dry_run=True, flash=[("bf16", 64, True), ("fp16", 128, False)]) == []
    out = capsys.readouterr().out
    assert "tc_flash_fwd_bf16_causal_d64  bf16  B=1 H=2 S=130 d=64 causal  on the CPU emulator\n  dry run" in out
    assert "tc_flash_fwd_d128  fp16  B=1 H=2 S=130 d=128  on the CPU emulator\n  dry run" in out


def test_module_08_flash_records_take_sdpa_flash_as_baseline():
    cudnn = Measurement("torch SDPA bf16 CUDNN_ATTENTION", "bf16", "baseline", 2.0e11, 1.0e8, backend="CUDNN_ATTENTION",
                        repeats=[summarize([0.4])])
    flash = Measurement("torch SDPA bf16 FLASH_ATTENTION", "bf16", "baseline", 2.0e11, 1.0e8, backend="FLASH_ATTENTION",
                        repeats=[summarize([0.5])])
    kernel = Measurement("tc_flash_fwd_bf16_causal_d64", "bf16", "kernel", 2.0e11, 1.0e8, repeats=[summarize([1.0])])
    report = _report(exercise="tc_flash_fwd_bf16_causal_d64", dtype="bf16", causal=True, kernel=kernel,
                     baselines=[cudnn, flash])
    rec = _bench_08().flash_record(report, "tc_flash_fwd_d64_causal")
    assert (rec["kernel"], rec["exercise"], rec["dtype"], rec["causal"]) == (
        "tc_flash_fwd_d64_causal", "tc_flash_fwd_bf16_causal_d64", "bf16", True)
    assert rec["baseline_backend"] == "FLASH_ATTENTION" and rec["ratio"] == 0.5 and rec["baseline_ms"] == 0.5
    assert rec["cudnn_ms"] == 0.4 and rec["cudnn_tflops"] == 500.0
    assert report.record()["baseline_backend"] == "CUDNN_ATTENTION"  # the fastest, when not told


# --------------------------------------------------------------------------- on a GPU

gpu = pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU (CuPy sees none)")


@pytest.fixture
def on_gpu():
    previous = grader.backend()
    grader.set_backend("gpu")
    yield
    grader.set_backend(previous)


QUICK = dict(repeats=2)


@gpu
def test_bench_matmul_on_gpu_against_cublas(on_gpu, tmp_path):
    from grader.benchmark import Budget

    report = grader.bench("matmul_tiled", solution_source("matmul_tiled"), shape="M=1024,N=1024,K=1024",
                          budget=Budget(min_runs=5, min_ms=20), **QUICK)
    assert report.check_passed and report.kernel.ran and len(report.kernel.repeats) == 2
    assert report.kernel.ms > 0 and report.kernel.tflops > 0
    assert report.baseline is not None and report.baseline.backend == "cublas"
    rec = report.record()
    assert rec["M"] == 1024 and rec["ratio"] > 0
    merge_records(tmp_path / "e.json", [rec])
    print(report.table())


@gpu
def test_bench_causal_attention_on_gpu_names_its_sdpa_backends(on_gpu):
    from grader.benchmark import Budget

    report = grader.bench("flash_fwd_causal", solution_source("flash_fwd_causal"), shape="B=1,H=4,S=1024,d=64",
                          budget=Budget(min_runs=5, min_ms=20))
    assert report.check_passed and report.causal and report.kernel.tflops > 0
    try:
        import torch  # noqa: F401
    except ImportError:
        assert all(not b.ran for b in report.baselines)
    else:
        assert report.baseline is not None and report.baseline.dtype == "fp32"
        assert {b.backend for b in report.baselines} >= {"FLASH_ATTENTION", "EFFICIENT_ATTENTION"}
    print(report.table())


@gpu
def test_bench_backward_with_zeroed_output_on_gpu(on_gpu):
    from grader.benchmark import Budget

    report = grader.bench("flash_bwd_atomic", solution_source("flash_bwd_atomic"), shape="B=1,H=2,S=256,d=32",
                          budget=Budget(min_runs=3, min_ms=5))
    assert report.check_passed and report.kernel.ms > 0
    print(report.table())


@gpu
def test_a_wrong_kernel_is_not_timed_on_gpu(on_gpu):
    from grader.wrong_corpus import wrong_kernel

    wrong = wrong_kernel("matmul_tiled", "b_tile_transposed").source()
    report = grader.bench("matmul_tiled", wrong)
    assert not report.check_passed and report.kernel is None and "differ" in report.check_message
    assert "not timed" in report.table()


@gpu
def test_bench_a_typedef_kernel_in_bfloat16_on_gpu(on_gpu):
    from grader.benchmark import Budget

    report = grader.bench("tc_flash_fwd_bf16_causal_d64", solution_source("tc_flash_fwd_bf16_causal_d64"),
                          shape="B=1,H=4,S=1024", budget=Budget(min_runs=5, min_ms=20))
    assert report.check_passed and report.dtype == "bf16" and report.causal and report.kernel.tflops > 0
    assert all(b.dtype == "bf16" for b in report.baselines)
    print(report.table())

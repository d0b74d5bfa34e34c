"""Module 12's variants benchmark (benchmarks/bench_12_variants.py) off the GPU: its two-stage descriptor
source passes the module's forward checks, every variant's kernel agrees with the float64 reference, and
``main`` runs end to end at a small shape (timers replaced) and writes what make_figures' table reads.
In Triton's interpreter without a GPU, compiled on one."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from grader import triton_support

triton_support.ensure_mode()  # before triton's first import: the interpreter on a machine without a GPU
pytest.importorskip("triton")
pytest.importorskip("torch")

from grader import reference as ref  # noqa: E402
from grader.checks import run_check  # noqa: E402
from repo_scripts import load_script  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def bench_12():
    triton_support.require()
    sys.path.insert(0, str(ROOT / "benchmarks"))
    return load_script("benchmarks/bench_12_variants.py", "bench_12_variants_under_test")


def _allocator(torch, dev):
    import triton

    if dev == "cuda":  # descriptors made inside a kernel need global scratch on a GPU (none in the interpreter)
        triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device=dev))


@pytest.mark.parametrize("exercise", ["triton_flash_forward", "triton_flash_forward_causal"])
def test_bench_12_two_stage_descriptor_source_passes_the_forward_checks(bench_12, exercise):
    result = run_check(exercise, bench_12.TWO_STAGE_SOURCE, include_hidden=True, seed=1234)
    assert result.passed, result.first_failure.message
    if exercise.endswith("causal") and triton_support.device() == "cpu":
        assert result.results[-1].message.endswith("tl.dot work as required")  # two stages, nothing above


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_bench_12_every_variant_matches_the_reference(bench_12, causal):
    import torch

    dev = triton_support.device()
    _allocator(torch, dev)
    kern = bench_12.kernels()
    B, H, S, d = 1, 2, 256, 64
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(B, H, S, d, generator=g).half().to(dev) for _ in range(3))
    want, want_lse = ref.attention_forward(*(x.double().cpu().numpy() for x in (q, k, v)), causal=causal,
                                           scale=d ** -0.5)
    for variant in bench_12.VARIANTS:
        for cfg in ((128, 64, 4, 2), (64, 64, 4, 3)):
            o, lse = torch.full_like(q, float("nan")), torch.full((B, H, S), float("nan"), device=dev)
            fn, args, kw, grid = bench_12.launch_spec(kern, variant, dict(q=q, k=k, v=v, o=o, lse=lse), B, H, S, d,
                                                      causal, cfg)
            fn[grid](*args, **kw)
            triton_support.synchronize()
            assert np.abs(o.double().cpu().numpy() - want).max() < 2e-3, (variant, cfg)
            assert np.abs(lse.double().cpu().numpy() - want_lse).max() < 1e-4, (variant, cfg)


def test_bench_12_variants_grids_and_arguments(bench_12):
    assert len(bench_12.FULL_GRID) == 15 and len(bench_12.QUICK_GRID) == 9
    assert all(bn <= bm for bm, bn, _, _ in bench_12.FULL_GRID + bench_12.QUICK_GRID)
    assert set(bench_12.QUICK_GRID) <= set(bench_12.FULL_GRID)
    assert bench_12.parse_list("fp16, bf16", bench_12.DTYPES, "dtype") == ["fp16", "bf16"]
    with pytest.raises(SystemExit, match="--variants: nope: choose from pointers, descriptors, ws, two_stage, "
                                         "grid_order, scaled_scores"):
        bench_12.parse_list("pointers,nope", bench_12.VARIANTS, "variants")
    # the launchers' own autotuning configurations are compiled with the grid's
    assert (128, 64, 4, 2) in bench_12.autotune_configs(bench_12.two_stage_module())
    assert all(len(c) == 4 for c in bench_12.autotune_configs(bench_12.solution_module()))


def test_bench_12_ablations_undo_one_choice_each(bench_12, monkeypatch):
    from grader.course import solution_source

    solution = solution_source("triton_flash_forward")
    order, scaled = bench_12.ablation_source("grid_order"), bench_12.ablation_source("scaled_scores")
    assert "if CAUSAL:\n        # Programs start" in solution and "if False:\n        # Programs start" in order
    assert "tl.exp2(s - shift[:, None])" in scaled and "s * qk_scale" not in scaled
    assert order.count("\n") == scaled.count("\n") == solution.count("\n")  # nothing else moved
    monkeypatch.setitem(bench_12.ABLATIONS, "grid_order", [("no such line", "")])
    from grader.wrong_corpus import StaleEdit

    with pytest.raises(StaleEdit, match="ablation 'grid_order': its find text 'no such line' no longer stands once"):
        bench_12.ablation_source("grid_order")


def test_bench_12_variants_main_writes_what_the_reading_reads(bench_12, tmp_path, monkeypatch):
    dev = triton_support.device()
    monkeypatch.setattr(bench_12, "DEVICE", dev)
    # main() sets GRADER_BACKEND=gpu where it is unset: restored after the test, for the tests after it
    monkeypatch.setenv("GRADER_BACKEND", os.environ.get("GRADER_BACKEND") or "auto")
    monkeypatch.setattr(bench_12, "SHAPE", dict(B=1, H=2, S=192))
    monkeypatch.setattr(bench_12, "QUICK_GRID", ((128, 64, 4, 2),))
    calls = []

    def fake_time_ms(torch, fn):  # each launch runs once; everything takes 0.1 us
        fn()
        calls.append(fn)
        return 1e-4, [1e-4]
    monkeypatch.setattr(bench_12, "time_ms", fake_time_ms)
    monkeypatch.setattr(bench_12, "do_bench", lambda triton, fn: (fn(), 2e-4)[1])
    bench_12.main(["--quick", "--dtype", "fp16", "--variants", "pointers,two_stage,grid_order", "--jobs", "1",
                   "--out", str(tmp_path)])
    out = json.loads((tmp_path / "triton_variants.json").read_text())
    assert out["dtypes"] == ["fp16"] and out["grid"] == "quick" and out["timing"].startswith("tflops: bench_12_triton")
    assert out["command"] == ("GRADER_BACKEND=gpu python benchmarks/bench_12_variants.py --quick --dtype fp16 "
                              "--variants pointers,two_stage,grid_order")
    assert [(c["dtype"], c["d"], c["causal"]) for c in out["configs"]] == [
        ("fp16", 64, False), ("fp16", 64, True), ("fp16", 128, False), ("fp16", 128, True)]
    for c in out["configs"]:
        assert set(c["best"]) == {"pointers", "descriptors, two-stage causal", "pointers, the grid's order"}
        for row in c["runs"]:
            assert "error" not in row and row["max_abs_err_vs_sdpa"] < 2e-3 and row["ms"] == 1e-4
            assert row["do_bench_ms"] == 2e-4 and row["do_bench_tflops"] < row["tflops"]
        assert set(c["launchers"]) == {"solution", "two_stage"}
        assert all(r["max_abs_err_vs_sdpa"] < 2e-3 for r in c["launchers"].values())

    mf = load_script("modules/12_triton/make_figures.py", "m12_make_figures_under_test")
    monkeypatch.setattr(mf, "VARIANTS", tmp_path / "triton_variants.json")
    table = mf.table_variants()
    assert "| d | causal | pointers | descriptors, two-stage causal | pointers, the grid's order |" in table
    assert "timed with §12's `time_ms`, CUDA events" in table and "(128×64, 4 warps, 2 stages)" in table
    assert "`descriptors, two-stage causal` against pointers: +0% at d = 64" in table
    assert "Pointers (the solution) against `pointers, the grid's order`: +0% at d = 64, +0% at d = 64 causal" in table


def test_bench_12_tables_name_the_autotuners_choice(bench_12):
    import types

    import triton

    main_bench = sys.modules["bench_12_triton"]  # imported by the variants script
    module = bench_12.solution_module()
    assert main_bench.tuned_config(module) is None  # nothing launched on a GPU yet
    module._flash_fwd_tuned.best_config = triton.Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=8, num_stages=3)
    assert main_bench.tuned_config(module) == "128x64 w8 s3"
    assert main_bench.tuned_config(types.SimpleNamespace(x=1)) is None


def test_bench_12_times_the_kernel_and_its_baselines_in_turn(bench_12, monkeypatch):
    main_bench = sys.modules["bench_12_triton"]
    times = {"kernel": [1.0, 1.2, 1.1, 1.3], "flash": [2.0, 2.0, 2.4, 2.2]}
    order = []

    def fake_time_ms(torch, fn):
        order.append(fn)
        return times[fn].pop(0), []
    monkeypatch.setattr(main_bench, "time_ms", fake_time_ms)
    timed = main_bench.time_in_turn(None, ["kernel", "flash", None])  # None: a backend that refused
    assert order == ["kernel", "flash", "flash", "kernel", "kernel", "flash", "flash", "kernel"]  # every other round reversed
    assert timed == [(1.15, [1.0, 1.2, 1.1, 1.3]), (2.1, [2.0, 2.0, 2.4, 2.2]), None]
    rec = main_bench.timing_fields(4.6e9, timed, None, "cuDNN refused")
    assert rec == dict(ms=1.15, tflops=4.0, repeat_ms=[1.0, 1.2, 1.1, 1.3], baseline="sdpa_flash", baseline_ms=2.1,
                       baseline_tflops=2.2, ratio=1.826, baseline_repeat_ms=[2.0, 2.0, 2.4, 2.2], cudnn_refused="cuDNN refused")

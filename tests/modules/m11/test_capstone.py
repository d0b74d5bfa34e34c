"""Module 11: the capstone's builds, its tuning space, `grader bench capstone`, and the committed
H100 results that the reading and `grader bench capstone` read (benchmarks/results/capstone.json)."""
import json
import statistics

import numpy as np
import pytest

import grader
from grader import autotune
from grader.__main__ import main
from grader.benchspec import get_spec, parse_shape
from grader.capstone import bench_capstone, build
from grader.course import ROOT, solution_source
from grader.errors import BackendUnavailableError, CourseError
from grader.exercises import m11_capstone as m11

RESULTS = json.loads((ROOT / "benchmarks" / "results" / "capstone.json").read_text())


def test_bench_capstone_refuses_on_the_emulator_and_says_how_to_check(on_emulator, tmp_path, capsys):
    path = tmp_path / "mine.cu"
    path.write_text(solution_source("capstone_fwd_d64"))
    assert main(["bench", "capstone", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert "python -m grader check capstone_fwd_d64 FILE --all" in err
    with pytest.raises(BackendUnavailableError, match="does not model speed"):
        bench_capstone(path.read_text())


def test_causal_padded_work_counts_half_the_scores_and_the_lengths():
    spec = get_spec("capstone_fwd_causal_d64")
    p = spec.params(parse_shape("", spec))
    assert p.lengths == (4096,) * 4  # timed with nothing padded
    assert spec.flops(p) == 4 * 4 * 16 * 4096**2 * 64 / 2
    assert spec.bytes(p, 2) == 2 * 4 * (4 * 16 * 4096 * 64) + 4 * (4 * 16 * 4096) + 4 * 4  # Q, K, V, O; L; lengths


def test_the_tuning_space_skips_q_fragments_that_cannot_fit():
    space = autotune.SPACES["capstone_fwd_d128"]
    configs = autotune.configurations(space)
    assert len(configs) == 3 * 2 ** 5  # TILE has three values
    skipped = [c for c in configs if space.exclude(c)]
    assert skipped and all(c["Q_IN_REGS"] == 1 and c["WARP_ROWS"] == 32 for c in skipped)
    assert not any(autotune.SPACES["capstone_fwd_d64"].exclude(c) for c in configs)


def test_at_each_length_the_kept_choices_won_the_race_of_the_sweeps_leaders():
    """At each S the sweep's fastest CANDIDATES raced, ROUNDS rounds each, and the lowest median was kept."""
    from repo_scripts import load_script
    bench = load_script("benchmarks/bench_11_capstone.py", "bench_11_capstone_picks")
    tuned = m11.tuned_configs()
    assert set(tuned) == set(m11.CONFIGS)
    for r in RESULTS["bench"]:
        key, choices = (r["dtype"], r["d"], r["causal"]), {k: r[k] for k in m11.SPACE}
        assert m11.tuned_configs(r["S"])[key] == choices
        if r["S"] == bench.SEQS[0]:
            assert choices == tuned[key]
        picks = [p for p in RESULTS["picks"] if (p["dtype"], p["d"], p["causal"], p["S"]) == (*key, r["S"])]
        assert [{k: p[k] for k in m11.SPACE} for p in picks] == bench.ranked(RESULTS["sweep"], key)[:bench.CANDIDATES]
        assert choices == {k: min(picks, key=lambda p: p["ms"])[k] for k in m11.SPACE}, (key, r["S"])
        for p in picks:
            assert len(p["rounds"]) == bench.ROUNDS
            assert p["ms"] == pytest.approx(statistics.median(p["rounds"]), rel=1e-3)


def test_the_committed_records_cover_every_configuration_and_length():
    records = RESULTS["bench"]
    seen = {(r["dtype"], r["d"], r["causal"], r["S"]) for r in records}
    assert seen == {(*c, s) for c in m11.CONFIGS for s in (4096, 16384, 32768)}
    for r in records:
        assert r["kernel"] == f"capstone_fwd_d{r['d']}" + ("_causal" if r["causal"] else "")
        assert r["baseline"].endswith("FLASH_ATTENTION") and r["ratio"] == pytest.approx(
            r["baseline_ms"] / r["ms"], rel=2e-3)


def test_the_package_keeps_the_committed_runs_launch_choices():
    # m11 reads its tuned choices from package data; a new results/capstone.json must be followed by
    # `python benchmarks/bench_11_capstone.py tuned` (its --merge does it), or this fails
    assert json.loads(m11.TUNED.read_text()) == m11.tuned_choices(RESULTS)
    assert len(m11.tuned_choices(RESULTS)["tuned"]) == len(m11.CONFIGS)


def test_missing_tuned_choices_fail_loudly(monkeypatch, tmp_path):
    monkeypatch.setattr(m11, "TUNED", tmp_path / "capstone_tuned.json")
    with pytest.raises(CourseError, match=r"capstone_tuned.json is missing \(No such file or directory\): the "
                                          r"capstone's tuned launch choices are package data"):
        m11.tuned_configs()


def test_a_tuned_build_rehearses_on_the_emulator(on_emulator):
    cfg = m11.tuned_configs()[("bf16", 128, True)]
    ex_id = build("bf16", 128, True, cfg)
    report = grader.bench(ex_id, solution_source("capstone_fwd_d64"), shape="B=1,H=2,S=130", dry_run=True)
    assert report.check_passed and report.dtype == "bf16" and report.causal, report.check_message


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("cfg", [m11.CONFIG, dict(WARPS=8, WARP_ROWS=16, TILE=128, STAGES=3)])
def test_the_tile_walk_with_the_right_mask_attends_exactly_the_visible_keys(causal, cfg):
    """The model behind the mask mistakes, run with the kernel's own rule, is the reference's mask:
    every visible key visited, no other key (padding or zero-filled rows past N) kept."""
    from types import SimpleNamespace
    from grader.exercises.shared import keep_mask
    p = SimpleNamespace(B=3, N=300, causal=causal)
    lengths = (300, 40, 0)
    tile = cfg["TILE"]

    def needs(key0, w0, kv_len):
        return key0 + tile > kv_len or (causal and key0 + tile - 1 > w0)

    keep, nk = m11.tile_walk_keep(p, lengths, cfg, needs,
                                  lambda at: (at.keys < at.kv_len) & ((at.keys <= at.row) if causal else True))
    assert nk == -(-300 // tile) * tile and not keep[..., 300:].any()
    want = np.broadcast_to(keep_mask(300, causal=causal, key_lengths=np.array(lengths)), (3, 1, 300, 300))
    assert np.array_equal(keep[..., :300], want)

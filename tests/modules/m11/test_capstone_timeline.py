"""benchmarks/timeline_capstone.py: the stamped copy of the capstone builds, the stamps' arithmetic is
right on a timeline made up here, and the committed runs are whole and timed the builds the bench kept."""
import json

import numpy as np
import pytest

from grader.capstone import build
from grader.checks import get_exercise
from grader.course import ROOT, solution_source
from grader.exercises import m11_capstone as m11
from repo_scripts import load_script

timeline = load_script("benchmarks/timeline_capstone.py", "timeline_capstone")
COMMITTED = json.loads((ROOT / "benchmarks" / "results" / "capstone_timeline.json").read_text())


def test_every_anchor_of_the_stamped_copy_is_in_the_solution_once():
    source = solution_source("capstone_fwd_d64")
    stamped = timeline.stamped_source(source)
    assert "unsigned long long* stamps)" in stamped and stamped.count("clock64()") == 4
    with pytest.raises(ValueError, match="parameter list"):
        timeline.stamped_source(source.replace(timeline.SIGNATURE, "float* L, int N, float scale) {"))
    with pytest.raises(ValueError, match="no copy may outlive"):
        timeline.stamped_source(source.replace(timeline.LOOP_DONE, ""))


def test_the_stamped_copy_compiles_for_the_gpus_of_the_course():
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc", reason="needs the nvrtc extra: pip install -e '.[nvrtc]'")
    from grader.nvrtc import compile_check

    for dtype, d, causal, S in timeline.RUNS:
        ex = get_exercise(build(dtype, d, causal, m11.tuned_configs(S)[(dtype, d, causal)]))
        sizes = compile_check(timeline.stamped_source(solution_source(ex.id)), options=ex.options, kernel=m11.KERNEL)
        assert set(sizes) == {"sm_80", "sm_90"}, (dtype, d, causal, S)


def _stamps(blocks, ghz=(2.0, 2.0)):
    """Rows of WORDS from (sm, entry_ns, first_ns, loop_min_ns, loop_max_ns, exit_ns, tiles); the cycle
    counter of SM i runs at ``ghz[i]`` from its own origin, as clock64 does."""
    rows = []
    for sm, entry, first, lo, hi, exit_, tiles in blocks:
        c = lambda ns: int((ns + 1000 * sm) * ghz[sm])  # noqa: E731 (a different origin per SM)
        rows.append([entry, exit_, c(entry), c(first), c(lo), c(hi), c(exit_), sm, tiles])
    return np.array(rows, dtype=np.uint64)


def test_the_summary_splits_a_made_up_timeline_into_its_parts():
    # two SMs, one block at a time; SM 1 runs one block fewer and waits for SM 0's last one
    blocks = [(0, 0, 2000, 9500, 10000, 13000, 4), (0, 13500, 15500, 23000, 23500, 26500, 4),
              (1, 0, 2000, 9500, 10000, 13000, 4)]
    s = timeline.summarise(_stamps(blocks))
    assert s["blocks"] == 3 and s["sms"] == 2 and s["blocks_per_sm"] == [1, 2] and s["blocks_at_once"] == 1
    assert s["tiles"] == 4
    assert s["clock_ghz"] == pytest.approx(2.0)
    assert s["span_us"] == pytest.approx(26.5)
    assert s["start_us"] == pytest.approx(2.0) and s["loop_us"] == pytest.approx(8.0)
    assert s["tile_us"] == pytest.approx(2.0) and s["end_us"] == pytest.approx(3.0)
    assert s["between_us"] == pytest.approx(0.5)
    assert s["idle_end_us"] == pytest.approx((0 + 13.5) / 2) and s["idle_start_us"] == 0
    total = 26.5 * 2
    assert s["shares"]["loop"] == pytest.approx(3 * 8.0 / total, abs=1e-5)
    assert s["shares"]["idle_end"] == pytest.approx(13.5 / total, abs=1e-5)
    assert sum(s["shares"].values()) == pytest.approx(1.0, abs=1e-4)


def test_each_block_is_timed_at_its_own_clock():
    """SMs run at different clocks under a power limit: a block's cycles convert at its own rate, so
    its start, loop and end still add up to its entry-to-exit time and the shares to one."""
    blocks = [(0, 0, 2000, 9500, 10000, 13000, 4), (1, 0, 1000, 9000, 11000, 13000, 4)]
    s = timeline.summarise(_stamps(blocks, ghz=(2.0, 1.5)))
    assert s["start_us"] == pytest.approx(1.5) and s["loop_us"] == pytest.approx(9.0) and s["end_us"] == pytest.approx(2.5)
    assert sum(s["shares"].values()) == pytest.approx(1.0, abs=1e-6)


def test_overlapping_blocks_are_counted_as_two_at_once_and_leave_no_gap():
    blocks = [(0, 0, 1000, 5000, 5000, 6000, 2), (0, 500, 1500, 5500, 5500, 6500, 2)]
    s = timeline.summarise(_stamps(blocks))
    assert s["blocks_at_once"] == 2 and s["between_us"] is None


def test_the_committed_runs_timed_the_kept_builds_and_add_up():
    runs = COMMITTED["runs"]
    assert [(r["dtype"], r["d"], r["causal"], r["S"]) for r in runs] == timeline.RUNS
    for r in runs:
        s = r["summary"]
        assert r["choices"] == m11.tuned_configs(r["S"])[(r["dtype"], r["d"], r["causal"])], (r["dtype"], r["S"])
        assert s["blocks_at_once"] == 1 and sum(s["shares"].values()) == pytest.approx(1.0, abs=1e-3)
        rows = m11.block_rows(r["choices"])
        assert s["blocks"] == r["B"] * r["H"] * -(-r["S"] // rows)
    assert ["blocks" in r for r in runs] == [True] + [False] * (len(runs) - 1)
    assert len(runs[0]["blocks"]["sm"]) == runs[0]["summary"]["blocks"]


def test_the_committed_grids_pair_each_ragged_head_count_with_the_next_even_one():
    grids = COMMITTED["grids"]
    assert [(g["dtype"], g["H"]) for g in grids[::2]] == [(dt, h) for dt in ("fp16", "bf16") for h in timeline.GRID_HEADS]
    for ragged, even in zip(grids[::2], grids[1::2]):
        per_head = ragged["blocks"] // ragged["H"]
        assert ragged["blocks"] % ragged["sms"] != 0 and even["blocks"] % even["sms"] == 0
        assert even["H"] == timeline.even_heads(ragged["H"], per_head, ragged["sms"]) == even["blocks"] // per_head
        for g in (ragged, even):
            assert g["choices"] == m11.tuned_configs(g["S"])[(g["dtype"], g["d"], False)]
            assert per_head == -(-g["S"] // m11.block_rows(g["choices"]))
            assert len(g["repeat_ms"]) == len(g["flash_repeat_ms"]) == timeline.ROUNDS


def test_even_heads_is_the_first_count_that_fills_every_round():
    assert timeline.even_heads(64, 16, 132) == 66 and timeline.even_heads(128, 16, 132) == 132
    assert timeline.even_heads(64, 16, 128) == 64  # 1024 blocks on 128 SMs already fill 8 rounds

"""Module 10's split-K forward on the host side: choose_fwd_splits' counts (pinned at the shapes of the H100 runs in
benchmarks/results/splitk_forward_partial.txt, and checked against the full run's sweep in splitk_forward.json), the
split-K benchmark's sweep and budget, and make_figures' table of benchmarks/results/splitk_forward.json (from a small
file written here, never the committed results)."""
import inspect
import json
import re
import sys
from pathlib import Path

import pytest

from grader.device import H100_SXM
from grader.exercises import m10_decoding as m10
from repo_scripts import load_script

ROOT = Path(__file__).resolve().parents[3]

# (B, H, S_q, N, d) -> (the rule's count, the fastest count of the partial runs' sweeps at it, None: not reached).
# choose_fwd_splits' docstring quotes these.
MEASURED = {
    (1, 8, 1024, 32768, 128): (2, 4),  # 2 splits within 3% of 4, both runs
    (1, 4, 4096, 16384, 128): (1, 1),
    (2, 16, 512, 65536, 128): (1, 1),
    (2, 16, 4096, 8192, 128): (1, 1),
    (1, 8, 1024, 32768, 64): (4, 4),
    (1, 4, 4096, 16384, 64): (2, 2),
    (2, 16, 512, 65536, 64): (2, 4),  # 2 splits within 2% of 4
    (2, 16, 4096, 8192, 64): (1, None),
}


def test_blocks_an_sm_holds_are_set_by_shared_memory():
    assert m10.splitk_shared_bytes(64) == 46_080 and m10.splitk_shared_bytes(128) == 87_040
    assert m10.splitk_resident_blocks(64) == 4
    assert m10.splitk_resident_blocks(128) == 2


@pytest.mark.parametrize("shape", list(MEASURED), ids=lambda s: "B{}_H{}_Sq{}_N{}_d{}".format(*s))
def test_choose_fwd_splits_at_the_measured_shapes(shape):
    B, H, S_q, N, d = shape
    assert m10.choose_fwd_splits(B, H, S_q, N, d=d) == MEASURED[shape][0]


def test_choose_fwd_splits_keeps_the_callers_signature():
    # the notebook and older callers pass (B, H, S_q, N) only: d = 64, as in the notebook's timing cell
    assert m10.choose_fwd_splits(1, 8, 1024, 32768) == m10.choose_fwd_splits(1, 8, 1024, 32768, d=64) == 4
    assert m10.choose_fwd_splits(1, 8, 1024, 32768, d=128, blocks_per_sm=4) == 4  # an explicit wave still wins
    assert m10.choose_fwd_splits(1, 8, 1024, 32768, d=64, sms=66) == 2


@pytest.mark.parametrize("d", [64, 128])
def test_choose_fwd_splits_fills_at_most_one_wave(d):
    wave = m10.splitk_resident_blocks(d) * H100_SXM.sms
    for B in (1, 2, 4):
        for H in (1, 2, 8, 32):
            for S_q in (1, 64, 100, 1024, 4096):
                for N in (64, 2048, 4096, 8192, 65536, 1 << 20):
                    s = m10.choose_fwd_splits(B, H, S_q, N, d=d)
                    grid = m10.splitk_tiles(S_q) * B * H
                    assert s >= 1 and s & (s - 1) == 0  # a power of two
                    if grid * 2 > wave:
                        assert s == 1  # the unsplit grid is more than half a wave: no split
                    if s > 1:
                        assert grid * s <= wave and m10.ceil_div(N, s) >= 2048
                    # it stops only at the wave or at the chunk floor
                    assert grid * 2 * s > wave or m10.ceil_div(N, 2 * s) < 2048


def test_the_split_k_benchmark_sweeps_up_to_8_splits_on_a_lighter_budget():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    bench = load_script("benchmarks/bench_10_splitk.py", "bench_10_splitk_under_test")
    decode = sys.modules["decode"]
    assert inspect.signature(decode.gpu_timing).parameters["budget"].default is decode.BUDGET
    assert bench.BUDGET.min_ms * 4 <= decode.BUDGET.min_ms and bench.BUDGET.warmup_ms < decode.BUDGET.warmup_ms
    for B, H, S_q, N, d in MEASURED:
        chosen = m10.choose_fwd_splits(B, H, S_q, N, d=d)
        assert bench.sweep_counts(N, chosen) == [1, 2, 4, 8]


@pytest.fixture
def figures(tmp_path, monkeypatch):
    mf = load_script("modules/10_decoding/make_figures.py", "m10_make_figures_under_test")
    monkeypatch.setattr(mf, "SPLITK_DATA", tmp_path / "splitk_forward.json")
    return mf


def _fake_results(path: Path):
    """Two (d, shape) pairs as bench_10_splitk.py writes them, made-up times."""
    bench, sweep = [], []
    for d, (B, H, S_q, N), times, sdpa in ((64, (1, 8, 1024, 32768), {1: 0.6, 2: 0.36, 4: 0.32, 8: 0.34}, (0.25, 0.28)),
                                         (128, (1, 4, 4096, 16384), {1: 0.6, 2: 0.65, 4: 0.64, 8: 0.69}, (0.47, 0.21))):
        chosen, flops, tiles = m10.choose_fwd_splits(B, H, S_q, N, d=d), 4.0 * B * H * S_q * N * d, S_q // 64
        for s, ms in times.items():
            merge = {"merge_ms": 0.05} if s == chosen else {}
            sweep.append(dict(B=B, H=H, S_q=S_q, S=N, d=d, splits=s, blocks=tiles * B * H * s, ms=ms,
                              tflops=flops / ms / 1e9, chosen=s == chosen, **merge))
        for kernel, s in ((f"splitk_fwd_d{d}", chosen), (f"splitk_nosplit_d{d}", 1)):
            ms = times[s]
            bench.append(dict(kernel=kernel, d=d, B=B, H=H, S=N, S_q=S_q, N=N, splits=s, blocks=tiles * B * H * s,
                              blocks_per_sm=tiles * B * H * s / 132, ms=ms, tflops=flops / ms / 1e9,
                              baseline_ms=sdpa[0], baseline_tflops=flops / sdpa[0] / 1e9, ratio=sdpa[0] / ms,
                              cudnn_ms=sdpa[1], cudnn_tflops=flops / sdpa[1] / 1e9, cudnn_ratio=sdpa[1] / ms,
                              **({"merge_ms": 0.05} if s == chosen else {})))
    path.write_text(json.dumps(dict(device="Fake GPU", sms=132, shapes_done=2, shapes=8, command="python x.py gpu",
                                    bench=bench, sweep=sweep)))


def test_the_splitk_table_is_a_placeholder_without_results(figures, capsys):
    table = figures.table_splitk()
    assert "| not measured yet |" in table and "does not exist yet" in capsys.readouterr().out


def test_the_splitk_table_from_results(figures):
    _fake_results(figures.SPLITK_DATA)
    table = figures.table_splitk()
    assert "Measured on Fake GPU (`python x.py gpu`)" in table and "stopped after 2 of its 8" in table
    rows = [line for line in table.splitlines() if line.startswith(("| 64 |", "| 128 |"))]
    assert len(rows) == 4  # two records' rows, two sweep rows
    d64 = rows[0].split(" | ")
    assert d64[6] == "4 (3.88)"  # the chosen count, 512 blocks
    assert d64[7].startswith("0.32 ms, ") and d64[8] == "0.05 ms" and d64[9].startswith("0.6 ms, ")
    assert d64[10] == "1.88×" and d64[11] == "4: 0.32 ms (1.00)"
    assert d64[12].endswith("(ours 0.78×)") and d64[12].startswith("0.25 ms")
    d128 = rows[1].split(" | ")
    assert d128[6] == "1 (1.94)" and d128[10] == "1.00×" and d128[11] == "1: 0.6 ms (1.00)"
    assert rows[2] == "| 64 | 1 | 8 | 1024 | 32768 | 0.6 | 0.36 | **0.32** | 0.34 |"
    assert rows[3] == "| 128 | 1 | 4 | 4096 | 16384 | **0.6** | 0.65 | 0.64 | 0.69 |"


def test_the_rule_table_is_arithmetic(figures):
    table = figures.table_splitk_rule()
    assert "| 64 | 46,080 bytes | 4 (4, 16) | 528 |" in table
    assert "| 128 | 87,040 bytes | 2 (2, 16) | 264 |" in table
    assert "| 1 | 8 | 1024 | 32768 | 128 | 4 | 512 (0.97) | 2 | 256 (0.97) |" in table


def test_the_readme_has_the_generated_regions():
    text = (ROOT / "modules" / "10_decoding" / "README.md").read_text()
    for name in ("splitk_rule", "splitk"):
        assert f"<!-- generated by make_figures.py: {name} -->" in text and f"<!-- end of {name} -->" in text


def _partial_sweeps():
    """{(run, B, H, S_q, N, d): {splits: ms}} from the sweep lines of the two cut-short H100 runs."""
    out, run = {}, None
    for line in (ROOT / "benchmarks" / "results" / "splitk_forward_partial.txt").read_text().splitlines():
        if line.startswith("# Run "):
            run = line[6]
        m = re.match(r"sweep d=(\d+) B=\s*(\d+) H=\s*(\d+) S_q=\s*(\d+) N=\s*(\d+) splits=\s*(\d+) .*?([\d.]+) ms",
                     line)
        if m:
            d, B, H, S_q, N, s = map(int, m.groups()[:6])
            out.setdefault((run, B, H, S_q, N, d), {})[s] = float(m.group(7))
    return {k: v for k, v in out.items() if len(v) > 1}


def test_the_rule_is_within_3_percent_of_the_fastest_measured_count():
    sweeps = _partial_sweeps()
    assert len(sweeps) == 11  # run A: 4 shapes at d = 128, 3 at d = 64; run B: 4 at d = 128
    for (run, B, H, S_q, N, d), times in sweeps.items():
        chosen, fastest = MEASURED[(B, H, S_q, N, d)]
        assert min(times, key=times.get) == fastest
        assert times[chosen] <= 1.03 * times[fastest], (run, B, H, S_q, N, d)


def test_the_rule_is_within_3_percent_of_the_fastest_count_of_the_full_run():
    sweep = json.loads((ROOT / "benchmarks" / "results" / "splitk_forward.json").read_text())["sweep"]
    shapes = {(r["B"], r["H"], r["S_q"], r["S"], r["d"]) for r in sweep}
    assert shapes == set(MEASURED)
    for B, H, S_q, N, d in shapes:
        times = {r["splits"]: r["ms"] for r in sweep if (r["B"], r["H"], r["S_q"], r["S"], r["d"]) == (B, H, S_q, N, d)}
        chosen = m10.choose_fwd_splits(B, H, S_q, N, d=d)
        assert times[chosen] <= 1.03 * min(times.values()), (B, H, S_q, N, d, times)

"""grader.autotune on the emulator: every way a configuration is rejected, the injected timer
choosing the best, the cache (a hit compiles nothing), the refusal to time without a GPU, the CLI;
and where CuPy sees a GPU, tuning timed by the benchmark harness.

The space is registered here, on module 00's vector_add made tunable through two macros, so these
tests do not depend on module 09."""
import json
from types import SimpleNamespace

import pytest

import grader
from grader import autotune
from grader.__main__ import main
from grader.benchmark import kernel_dtype
from grader.benchspec import SPECS, BenchSpec
from grader.checks import REGISTRY, get_exercise
from grader.course import solution_source
from grader.kernel import RawKernel

TUNABLE = r'''
#ifndef THREADS
#define THREADS 256
#endif
#ifndef SKIP_LAST
#define SKIP_LAST 0
#endif
#if THREADS == 64
#error "this kernel does not support 64 threads per block"
#endif
// Each block covers THREADS elements as two rows of threads, so the launch has to agree with the macro.
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * THREADS + threadIdx.y * blockDim.x + threadIdx.x;
    if (i < n - SKIP_LAST) c[i] = a[i] + b[i];
}
'''

# Each configuration whose launch fits, as the timer would see it: ms by threads per block.
TIMES = {128: 2.0, 256: 0.5}
EXPECTED = {
    (64, 0): "compile error: line 9: error: #error \"this kernel does not support 64 threads per block\"",
    (64, 1): "excluded: one wrong build is enough",
    (128, 0): "ok",
    (128, 1): "excluded: one wrong build is enough",
    (256, 0): "ok",
    (256, 1): "check failed: case 'one_element' (n=1, seed=1): 1 of 1 elements of c (1,) differ.",
    (2048, 0): "over the limit: block(1024, 2, 1) has 2048 threads; a block holds at most 1024",
    (2048, 1): "excluded: one wrong build is enough",
}


@pytest.fixture
def space(monkeypatch, tmp_path):
    previous = grader.backend()
    grader.set_backend("cpu")
    get_exercise("vector_add")  # registers the course's exercises (and their spaces) first
    s = autotune.Space(
        exercise="vector_add",
        params={"THREADS": (64, 128, 256, 2048), "SKIP_LAST": (0, 1)},
        grid=lambda p, cfg: grader.ceil_div(p.n, cfg["THREADS"]),
        block=lambda p, cfg: (cfg["THREADS"] // 2, 2),
        exclude=lambda cfg: "one wrong build is enough" if cfg["SKIP_LAST"] and cfg["THREADS"] != 256 else None,
    )
    monkeypatch.setitem(autotune.SPACES, "vector_add", s)
    # a benchmark declaration, so that the shape is parsed and TFLOP/s computed as for a real exercise
    monkeypatch.setitem(SPECS, "vector_add", BenchSpec("vector_add", "vector", {"n": 1 << 20}, lambda p: float(p.n),
                                                       lambda p, e: 3.0 * e * p.n))
    monkeypatch.setattr(autotune, "cache_path", lambda: tmp_path / "autotune.json")
    yield s
    grader.set_backend(previous)


@pytest.fixture
def counted(monkeypatch):
    """Counts of timer calls and of compilations, and the timer."""
    calls = {"timer": 0, "compile": 0}
    compile_ = RawKernel.compile

    def counting_compile(self):
        calls["compile"] += 1
        return compile_(self)

    def timer(ex, kernel, p, dtype):
        calls["timer"] += 1
        assert p.n == 4096 and dtype == "fp32" and kernel.options == ex.options
        return TIMES[ex.block(p)[0] * 2]

    monkeypatch.setattr(RawKernel, "compile", counting_compile)
    return calls, timer


def _statuses(result):
    return {(r.cfg["THREADS"], r.cfg["SKIP_LAST"]): r.status for r in result.rows}


def test_configurations_and_options():
    s = autotune.Space("x", {"A": (1, 2), "B": (3, 4)}, grid=None, block=None)
    assert autotune.configurations(s) == [{"A": 1, "B": 3}, {"A": 1, "B": 4}, {"A": 2, "B": 3}, {"A": 2, "B": 4}]
    # the space's macros replace the exercise's same-named ones; the others stay, in order
    assert autotune.options_for(("-DHEAD_DIM=64", "-DSTAGES=2", "-DCAUSAL=1"), {"STAGES": 3, "BLOCK_ROWS": 64}) == \
        ("-DHEAD_DIM=64", "-DCAUSAL=1", "-DSTAGES=3", "-DBLOCK_ROWS=64")
    with pytest.raises(ValueError, match="non-empty tuple"):
        autotune.register_space(autotune.Space("x", {"A": []}, grid=None, block=None))


def test_a_configuration_is_a_copy_of_the_row():
    ex = get_exercise("vector_add")
    s = autotune.Space("vector_add", {"THREADS": (128,)}, grid=lambda p, cfg: p.n // cfg["THREADS"],
                       block=lambda p, cfg: cfg["THREADS"], shared_mem=lambda p, cfg: 4 * cfg["THREADS"],
                       row_fields=lambda cfg: {"io_case": f"rows{cfg['THREADS']}"})
    v = autotune.variant(ex, s, {"THREADS": 128})
    p = SimpleNamespace(n=1024)
    assert (v.grid(p), v.block(p), v.shared_mem(p), v.options, v.io_case) == (8, 128, 512, ("-DTHREADS=128",), "rows128")
    assert v.cases == ex.cases and v.reference is ex.reference and REGISTRY["vector_add"] is ex


def test_every_rejection_and_the_timer_picks_the_best(space, counted):
    calls, timer = counted
    result = autotune.tune("vector_add", TUNABLE, shape="n=4096", timer=timer)
    assert _statuses(result) == EXPECTED
    assert calls["timer"] == 2  # only the configurations that pass are timed
    assert result.best == {"THREADS": 256, "SKIP_LAST": 0}
    assert result.best_options == ("-DTHREADS=256", "-DSKIP_LAST=0")
    fast = next(r for r in result.rows if r.cfg == result.best)
    assert fast.ms == 0.5 and fast.tflops == pytest.approx(4096 / 0.5 / 1e9)
    assert not result.cached and result.shape == {"n": 4096} and result.device == "CPU emulator"
    table = result.table()
    assert "<- best" in table and "compile with: -DTHREADS=256 -DSKIP_LAST=0" in table
    assert [r["status"] for r in result.records()] == list(EXPECTED.values())
    assert result.records()[4] == {"kernel": "vector_add", "dtype": "fp32", "n": 4096, "THREADS": 256, "SKIP_LAST": 0,
                                   "status": "ok", "ms": 0.5, "tflops": fast.tflops, "device": "CPU emulator"}
    assert REGISTRY["vector_add"].block(None) == 256 and REGISTRY["vector_add"].options == ()  # the copy is not registered


class RacingTimer:
    """A timer with a race (as the GPU's has): ``single`` ms by threads per block for the first
    measurement, ``rounds`` the race's ms per round."""

    def __init__(self, single, rounds):
        self.single, self.rounds, self.raced = single, rounds, []

    def __call__(self, ex, kernel, p, dtype):
        return self.single[ex.block(p)[0] * 2]

    def race(self, builds):
        threads = [ex.block(p)[0] * 2 for ex, kernel, p, dtype in builds]
        assert all(kernel.options == ex.options and p.n == 4096 for ex, kernel, p, dtype in builds)
        self.raced.append(threads)
        return [self.rounds[t] for t in threads]


def test_the_finalists_are_raced_and_their_median_decides(space):
    # 128 threads looked 2% slower alone; in turn it is faster in three rounds of four
    timer = RacingTimer({128: 0.51, 256: 0.5}, {128: [0.46, 0.47, 0.52, 0.45], 256: [0.5, 0.49, 0.5, 0.51]})
    result = autotune.tune("vector_add", TUNABLE, shape="n=4096", timer=timer, cache=False)
    assert timer.raced == [[256, 128]]  # the fastest first
    assert result.best == {"THREADS": 128, "SKIP_LAST": 0}
    raced = {r.cfg["THREADS"]: r for r in result.rows if r.rounds}
    assert raced[128].ms == pytest.approx(0.465) and raced[256].ms == pytest.approx(0.5)
    assert raced[128].tflops == pytest.approx(4096 / 0.465 / 1e9)
    assert result.records()[2]["rounds"] == [0.46, 0.47, 0.52, 0.45] and "rounds" not in result.records()[0]
    assert "<- best  (raced: median of 4)" in result.table()


def test_a_configuration_beyond_the_margin_is_not_raced(space):
    timer = RacingTimer({128: 0.5 * (1 + autotune.FINAL_MARGIN) * 1.01, 256: 0.5}, {})
    result = autotune.tune("vector_add", TUNABLE, shape="n=4096", timer=timer, cache=False)
    assert timer.raced == [] and result.best == {"THREADS": 256, "SKIP_LAST": 0}
    assert all(r.rounds is None for r in result.rows)


def test_cache_hit_compiles_nothing_and_refresh_tunes_again(space, counted, tmp_path):
    calls, timer = counted
    first = autotune.tune("vector_add", TUNABLE, shape={"n": 4096}, timer=timer)
    stored = json.loads((tmp_path / "autotune.json").read_text())["entries"]
    assert len(stored) == 1 and next(iter(stored)).startswith("CPU emulator | vector_add | n=4096 | fp32 | ")
    before = dict(calls)

    hit = autotune.tune("vector_add", TUNABLE, shape="n=4096", timer=timer)
    assert calls == before  # neither compiled nor timed
    assert hit.cached and "(cached" in hit.table()
    assert hit.best == first.best and _statuses(hit) == EXPECTED
    path = tmp_path / "mine.cu"
    path.write_text(TUNABLE)
    assert autotune.tune("vector_add", path, shape="n=4096", timer=timer).cached  # a file holding the same source
    assert autotune.tune("vector_add", str(path), shape="n=4096", timer=timer).cached
    assert calls == before

    again = autotune.tune("vector_add", TUNABLE, shape="n=4096", timer=timer, refresh=True)
    assert not again.cached and calls["timer"] == before["timer"] + 2 and calls["compile"] > before["compile"]

    other_shape = autotune.tune("vector_add", TUNABLE, shape="n=8192", timer=lambda ex, k, p, dt: 1.0)
    edited = autotune.tune("vector_add", TUNABLE + "// edited\n", shape="n=4096", timer=timer)
    assert not other_shape.cached and not edited.cached  # the shape and the source are part of the key
    assert len(json.loads((tmp_path / "autotune.json").read_text())["entries"]) == 3


def test_without_a_gpu_every_configuration_is_checked_but_none_chosen(space, tmp_path):
    result = autotune.tune("vector_add", TUNABLE, shape="n=4096")
    assert _statuses(result) == EXPECTED
    assert result.best is None and result.best_options is None
    assert all(r.ms is None for r in result.rows)
    assert result.note.startswith("timing needs a GPU: the CPU emulator does not model a GPU's speed")
    assert "no best configuration: timing needs a GPU" in result.table()
    assert not (tmp_path / "autotune.json").exists()


def test_a_block_over_what_the_builds_registers_allow_is_rejected_before_its_check(space, monkeypatch, counted):
    """On a GPU the compiled build says how many threads its registers allow (fewer than 1024 when
    each thread needs many): a configuration over that is rejected as over the limit, not run."""
    calls, timer = counted
    monkeypatch.setattr(RawKernel, "max_threads_per_block", lambda self: 192)
    result = autotune.tune("vector_add", TUNABLE, shape="n=4096", timer=timer)
    statuses = _statuses(result)
    assert statuses[(256, 0)] == "over the limit: 256 threads per block, where this build's registers allow 192"
    assert statuses[(128, 0)] == "ok" and result.best == {"THREADS": 128, "SKIP_LAST": 0}
    assert calls["timer"] == 1


def test_shared_memory_over_the_device_limit_is_rejected_before_compiling(space, monkeypatch, counted):
    calls, timer = counted
    monkeypatch.setitem(autotune.SPACES, "vector_add", autotune.Space(
        "vector_add", {"THREADS": (256,)}, grid=space.grid, block=space.block,
        shared_mem=lambda p, cfg: 4 * p.n))  # n floats staged in shared memory: too many at n = 65536
    result = autotune.tune("vector_add", TUNABLE, shape="n=65536", timer=timer)
    (row,) = result.rows
    assert row.status == "over the limit: 262144 bytes of dynamic shared memory per block, over the 232448 this device allows"
    assert calls == {"timer": 0, "compile": 0} and result.best is None


def test_dtype_is_the_kernels_own(space):
    with pytest.raises(grader.CourseError, match="vector_add takes fp32 tensors .* only be tuned with --dtype fp32"):
        autotune.tune("vector_add", TUNABLE, dtype="fp16")
    # module 08's kernel names its tensors' type `elem` (a typedef): the exercise's outputs tell
    source = solution_source("tc_flash_fwd_d64")
    assert "const elem* Q" in source
    assert kernel_dtype(source, get_exercise("tc_flash_fwd_d64")) == "fp16"
    assert kernel_dtype(source, get_exercise("tc_flash_fwd_bf16_d64")) == "bf16"


def test_cli(space, tmp_path, capsys):
    path = tmp_path / "mine.cu"
    path.write_text(TUNABLE)
    assert main(["tune", "vector_add", str(path), "--shape", "n=4096"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("tune vector_add  fp32  n=4096  on CPU emulator\n")
    progress = err.splitlines()  # one line per configuration as it finishes: a space takes minutes
    assert len(progress) == 8 and progress[0].startswith("[1/8, ") and progress[-1].startswith("[8/8, ")
    assert progress[0].endswith("THREADS=64 SKIP_LAST=0: " + EXPECTED[(64, 0)])
    assert "check failed: case 'one_element'" in out and "no best configuration: timing needs a GPU" in out

    assert main(["tune", "row_scale", str(path)]) == 2
    assert "no autotuning space is registered for 'row_scale'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["tune", "--help"])
    assert exit_.value.code == 0 and "--refresh" in capsys.readouterr().out


@pytest.mark.skipif(not grader.gpu_status()[0], reason="needs a CUDA GPU (CuPy sees none)")
def test_tune_times_on_the_gpu_with_the_benchmark_harness(monkeypatch, tmp_path):
    previous = grader.backend()
    grader.set_backend("gpu")
    monkeypatch.setattr(autotune, "cache_path", lambda: tmp_path / "autotune.json")
    # module 02's tiled matmul with its tile size given at compile time
    source = solution_source("matmul_tiled").replace("#define TILE 16", "#ifndef TILE\n#define TILE 16\n#endif")
    monkeypatch.setitem(autotune.SPACES, "matmul_tiled", autotune.Space(
        "matmul_tiled", {"TILE": (8, 16, 32, 64)},
        grid=lambda p, cfg: (grader.ceil_div(p.N, cfg["TILE"]), grader.ceil_div(p.M, cfg["TILE"])),
        block=lambda p, cfg: (cfg["TILE"], cfg["TILE"])))
    try:
        result = autotune.tune("matmul_tiled", source, shape="M=1024,N=1024,K=1024")
        again = autotune.tune("matmul_tiled", source, shape="M=1024,N=1024,K=1024")
    finally:
        grader.set_backend(previous)
    print(result.table())
    statuses = [r.status for r in result.rows]
    assert statuses[:3] == ["ok"] * 3 and statuses[3].startswith("over the limit: block(64, 64, 1) has 4096 threads")
    assert all(r.ms > 0 and r.tflops > 0 for r in result.rows[:3])
    assert result.best in [r.cfg for r in result.rows[:3]] and result.device != "CPU emulator"
    assert again.cached and again.best == result.best

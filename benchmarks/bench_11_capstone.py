"""Module 11's GPU evidence: the capstone forward in every configuration fp16/bf16 x d 64/128 x
causal/not, its launch choices (WARPS, WARP_ROWS, TILE, STAGES, ...) swept per configuration at
B=4, H=16, S=4096; at each S the sweep's CANDIDATES fastest choices raced (timed in turn, ROUNDS
times) and the fastest kept there; the kept builds then timed at S = 4096, 16384 and 32768 beside SDPA's flash
backend (the target: at least 1.0x) and cuDNN's. The kernel is read from the instructor notebook
(grader.course.solution_source): the source the course grades.

    python benchmarks/bench_11_capstone.py gpu --out DIR [--merge]   # on a GPU (about 10 minutes: split it with --only)
    python benchmarks/bench_11_capstone.py gpu --only fp16:128:1 --out DIR [--merge]
                                # those configurations again, kept beside the others of results/capstone.json
    python benchmarks/bench_11_capstone.py gpu --reuse-sweep --out DIR [--only ...]
                                # the S = 4096 sweep taken from results/capstone.json; the rest measured again
    python benchmarks/bench_11_capstone.py gpu --reuse-picks --out DIR [--merge]
                                # the choices too: only the records timed again (about 6 minutes)
    python benchmarks/bench_11_capstone.py emulator                  # every tuned build checked, no timing

Writes DIR/capstone.json: ``tuned`` (the fastest choices per configuration, read by
``python -m grader bench capstone`` and module 11's reading), ``sweep`` (every choice tried: time,
registers, local-memory bytes, or why it was rejected), ``picks`` (the candidates raced at each S), ``ablation`` (fp16: the kept build with one idea
taken back at a time, see ABLATIONS) and ``bench`` (the records; kernel names
``capstone_fwd_d64[_causal]``, dtype and S are fields). ``--merge`` puts the records into
results/gpu_evidence.json and copies capstone.json into results/.
"""
from __future__ import annotations

import argparse
import itertools
import json
import shutil
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import grader  # noqa: E402
from grader import benchmark, benchspec  # noqa: E402
from grader.benchmark import Budget  # noqa: E402
from grader.capstone import build  # noqa: E402
from grader.checks import REGISTRY, run_check  # noqa: E402
from grader.course import solution_source  # noqa: E402
from grader.device import H100_SXM  # noqa: E402
from grader.exercises import m11_capstone as m11  # noqa: E402
from grader.kernel import RawKernel  # noqa: E402
from grader.wrong_corpus import replace_each_once  # noqa: E402

RESULTS = Path(__file__).parent / "results"
SEQS = (4096, 16384, 32768)
FLASH = "FLASH_ATTENTION"
# The sweep times each choice once, alone: choices a few percent apart trade places from run to
# run. At every S its fastest CANDIDATES are raced (at a longer S they can also trade places for
# real: the grid's tail matters less, the L2's hold on K and V more), ROUNDS measurements each.
CANDIDATES = 8
ROUNDS = 4


def record_name(d, causal):
    return f"capstone_fwd_d{d}{'_causal' if causal else ''}"


def flash_record(report, name):
    """The record against SDPA flash, with cuDNN's figures and both baselines' per-repeat medians beside the
    capstone's (``repeat_ms``): round by round, the ratios and how far the run moved them."""
    rec = report.record(against=FLASH) | {"kernel": name}
    ran = {b.backend: b for b in report.baselines if b.ran}
    if flash := ran.get(FLASH):
        rec["baseline_repeat_ms"] = [benchmark._sig(s.median) for s in flash.repeats]
    if cudnn := ran.get("CUDNN_ATTENTION"):
        rec |= {"cudnn_ms": benchmark._sig(cudnn.ms), "cudnn_tflops": benchmark._sig(cudnn.tflops),
                "ratio_cudnn": benchmark._sig(cudnn.ms / report.kernel.ms),
                "cudnn_repeat_ms": [benchmark._sig(s.median) for s in cudnn.repeats]}
    return rec


def registers(source, ex_id):
    attrs = RawKernel(source, m11.KERNEL, options=REGISTRY[ex_id].options).compile()._compiled._kernel.attributes
    return int(attrs["num_regs"]), int(attrs["local_size_bytes"])


def sweep(source, dtype, d, causal, rows):
    """Every configuration of the space at S=4096, timed alone; the fastest one's choices."""
    best = None
    for values in itertools.product(*m11.SPACE.values()):
        cfg = dict(zip(m11.SPACE, values))
        row = dict(dtype=dtype, d=d, causal=causal, **cfg)
        if why := m11.excluded(d, cfg):
            rows.append(row | dict(status=why))
            continue
        smem = m11.shared_bytes(d, cfg)
        if smem > H100_SXM.max_shared_per_block_optin:
            rows.append(row | dict(status=f"{smem} bytes of shared memory: over the per-block limit"))
            continue
        ex_id = build(dtype, d, causal, cfg)
        try:
            regs, local = registers(source, ex_id)
            report = grader.bench(ex_id, source, dtype=dtype, baselines=False, budget=Budget(min_runs=5, min_ms=60))
        except Exception as exc:  # a configuration that does not compile or launch is a row, not a stop
            rows.append(row | dict(status=f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"))
            continue
        if not report.check_passed:
            rows.append(row | dict(status="check failed: " + report.check_message.splitlines()[0]))
            continue
        k = report.kernel
        rows.append(row | dict(status="ok", ms=benchmark._sig(k.ms), tflops=benchmark._sig(k.tflops), regs=regs,
                               local_bytes=local, shared_bytes=smem))
        print(f"  {dtype} d={d} causal={causal} {cfg}: {k.ms:.4g} ms {k.tflops:.4g} TF/s, {regs} regs, "
              f"{local} B local", flush=True)
        if best is None or k.ms < best[0]:
            best = (k.ms, cfg)
    return best[1]


def key_of(row):
    return row["dtype"], row["d"], row["causal"]


def ranked(rows, key):
    """The choices of one configuration's sweep rows that ran, fastest first."""
    ok = sorted((r for r in rows if key_of(r) == key and r.get("status") == "ok"), key=lambda r: r["ms"])
    return [{k: r[k] for k in m11.SPACE} for r in ok]


def pick(source, dtype, d, causal, s, candidates, picks):
    """The fastest of ``candidates`` at sequence length ``s``: each checked, then all of them raced
    (grader.benchmark.race: ROUNDS measurements each, in turn), the median of its rounds deciding, as
    the autotuner decides between its finalists."""
    builds = []
    for cfg in candidates:
        ex_id = build(dtype, d, causal, cfg)
        result = run_check(ex_id, source)
        if not result.passed:
            raise SystemExit(f"{dtype} d={d} causal={causal} {cfg}: {result.first_failure.message}")
        spec = benchmark.get_spec(ex_id)
        builds.append((REGISTRY[ex_id], RawKernel(source, m11.KERNEL, options=REGISTRY[ex_id].options).compile(),
                       spec.params(benchmark.parse_shape(dict(S=s), spec)), dtype))
    flops = spec.flops(builds[0][2])  # the same work for every candidate
    best = None
    for cfg, rounds in zip(candidates, benchmark.race(builds, ROUNDS)):
        ms = statistics.median(rounds)
        picks.append(dict(dtype=dtype, d=d, causal=causal, S=s, **cfg, ms=benchmark._sig(ms),
                          tflops=benchmark._sig(flops / ms / 1e9), rounds=[benchmark._sig(x) for x in rounds]))
        if best is None or ms < best[0]:
            best = (ms, cfg)
    print(f"  {dtype} d={d} causal={causal} S={s}: kept {best[1]}", flush=True)
    return best[1]


# One idea of the kernel taken back at a time, as edits of the solution ((find, replace), ...): the
# reading's ablation table. Each is timed at the tuned choices of the fp16 configurations.
ABLATIONS = {
    "mask code in every tile (one loop body)": ((
        "            attend<false>(Qw, qf, Ks, Ks + TILE * STRIDE, o, m, l, key0, w0, kv_len, scale_log2);",
        "            attend<true>(Qw, qf, Ks, Ks + TILE * STRIDE, o, m, l, key0, w0, kv_len, scale_log2);"),),
    "exp2f instead of fast_exp2": (("#include <cuda_bf16.h>\n", "#include <cuda_bf16.h>\n#define fast_exp2 exp2f\n"),),
    "__launch_bounds__(32 * WARPS) on the kernel": ((
        'extern "C" __global__ void capstone_fwd(', 'extern "C" __global__ void __launch_bounds__(WARPS * 32) capstone_fwd('),),
    "the copy loop strided from threadIdx.x (trip count unknown to the compiler)": ((
        """    const int r = threadIdx.x / CHUNKS, col = threadIdx.x % CHUNKS * 8;
    dst += r * STRIDE + col;
    if (row0 + ROWS <= N) {
        src += (size_t)(row0 + r) * HEAD_DIM + col;
#pragma unroll
        for (int i = 0; i < ROWS / PASS; ++i) cp_async_cg16(dst + i * PASS * STRIDE, src + i * PASS * HEAD_DIM);
    } else {
#pragma unroll
        for (int i = 0; i < ROWS / PASS; ++i) {
            const int row = row0 + r + i * PASS;
            cp_async_cg16_zfill(dst + i * PASS * STRIDE, src + (size_t)(row < N ? row : 0) * HEAD_DIM + col,
                                row < N ? 16 : 0);
        }
    }
""",
        """#pragma unroll
    for (int c = threadIdx.x; c < ROWS * HEAD_DIM / 8; c += WARPS * 32) {
        const int r = c / (HEAD_DIM / 8), col = c % (HEAD_DIM / 8) * 8;
        const bool inside = row0 + r < N;
        cp_async_cg16_zfill(dst + r * STRIDE + col, src + (size_t)(inside ? row0 + r : 0) * HEAD_DIM + col,
                            inside ? 16 : 0);
    }
"""),),
    "module 09's block order (causal: one head's query blocks at a time, heaviest first)": ((
        "    if (CAUSAL) heaviest_first(4 * (size_t)N * HEAD_DIM, true, bh, qb);  // the blocks read K and V",
        "    if (CAUSAL) qb = gridDim.x - 1 - blockIdx.x;"),),
    "every score scaled before the max (a multiply per score)": (
        ("            for (int e = 0; e < 4; ++e) {\n                if (MASKED) {",
         "            for (int e = 0; e < 4; ++e) {\n                s[rg][n][e] *= scale_log2;\n                if (MASKED) {"),
        ("mx[r] = fmaxf(m[rg][r], mx[r] * scale_log2);", "mx[r] = fmaxf(m[rg][r], mx[r]);"),
        ("fast_exp2(fmaf(s[rg][n][e], scale_log2, -base[e / 2]))", "fast_exp2(s[rg][n][e] - base[e / 2])")),
}


def ablation(source, dtype, d, causal, cfg, kept_tflops):
    """The kernel with each ABLATIONS edit, timed at this configuration's kept choices."""
    ex_id = build(dtype, d, causal, cfg)
    rows = []
    for what, edits in ABLATIONS.items():
        report = grader.bench(ex_id, replace_each_once(source, edits, f"ablation {what!r}"), dtype=dtype,
                              baselines=False, budget=Budget(min_runs=10, min_ms=150))
        if not report.check_passed:
            raise SystemExit(f"ablation {what!r}: {report.check_message}")
        rows.append(dict(dtype=dtype, d=d, causal=causal, change=what, tflops=benchmark._sig(report.kernel.tflops),
                         kept_tflops=kept_tflops))
        print(f"  ablation {dtype} d={d} causal={causal} {what}: {report.kernel.tflops:.4g} TF/s "
              f"(kept: {kept_tflops})", flush=True)
    return rows


def gpu_main(out: Path, source: str, repeats: int = 4, seqs=SEQS, configs=m11.CONFIGS, reuse_sweep: bool = False,
             reuse_picks: bool = False):
    """Sweep (or, ``reuse_sweep``, take results/capstone.json's sweep and ablation rows), race its leaders at
    each S (or, ``reuse_picks``, keep the choices of its records there), time the kept builds at every S of ``seqs``
    beside the baselines: ``repeats`` rounds, every other one in reverse order (grader.bench)."""
    out.mkdir(parents=True, exist_ok=True)
    tuned, rows, records, ablations, picks = [], [], [], [], []
    reuse_sweep = reuse_sweep or reuse_picks
    committed = json.loads((RESULTS / "capstone.json").read_text()) if reuse_sweep else None

    def save():
        (out / "capstone.json").write_text(json.dumps(dict(tuned=tuned, sweep=rows, picks=picks, bench=records,
                                                           ablation=ablations), indent=1) + "\n")

    for dtype, d, causal in configs:
        key = (dtype, d, causal)
        if reuse_sweep:
            rows += [r for r in committed["sweep"] if key_of(r) == key]
            ablations += [r for r in committed["ablation"] if key_of(r) == key]
            cfg = ranked(rows, key)[0]
        else:
            cfg = sweep(source, dtype, d, causal, rows)
        if reuse_picks:
            cfg = m11.tuned_configs()[key]
        elif SEQS[0] in seqs:
            cfg = pick(source, dtype, d, causal, SEQS[0], ranked(rows, key)[:CANDIDATES], picks)
        tuned.append(dict(dtype=dtype, d=d, causal=causal, **cfg))
        for s in seqs:
            if reuse_picks:
                kept = m11.tuned_configs(s)[key]
                picks += [r for r in committed["picks"] if key_of(r) == key and r["S"] == s]
            elif s == SEQS[0]:
                kept = cfg
            else:
                kept = pick(source, dtype, d, causal, s, ranked(rows, key)[:CANDIDATES], picks)
            report = grader.bench(build(dtype, d, causal, kept), source, dtype=dtype, shape=dict(S=s), repeats=repeats)
            if not report.check_passed:
                raise SystemExit(f"{dtype} d={d} causal={causal} {kept}: {report.check_message}")
            rec = flash_record(report, record_name(d, causal)) | kept
            records.append(rec)
            print(f"{rec['kernel']:26s} {dtype} S={s:<6d} {rec['ms']:8.4g} ms {rec['tflops']:6.4g} TF/s  "
                  f"x{rec['ratio']} of SDPA flash ({rec['baseline_tflops']} TF/s), cuDNN {rec.get('cudnn_tflops')} "
                  f"TF/s  {kept}", flush=True)
            save()
        if dtype == "fp16" and not reuse_sweep and SEQS[0] in seqs:
            kept_tflops = next(r["tflops"] for r in records if key_of(r) == key and r["S"] == SEQS[0])
            ablations += ablation(source, dtype, d, causal, cfg, kept_tflops)
        save()


def merge_configs(out: Path, configs) -> None:
    """DIR/capstone.json (a run of ``configs`` only) merged into results/capstone.json, whose other
    configurations are kept (same GPU model required): their tuned choices, sweep rows, records and
    ablation rows replaced, in m11.CONFIGS order. Writes the whole file to DIR/capstone.json."""
    cap, new = (json.loads(p.read_text()) for p in (RESULTS / "capstone.json", out / "capstone.json"))
    devices = {r.get("device") for r in cap["bench"] + new["bench"]}
    if len(devices) != 1:
        raise SystemExit(f"results/capstone.json and this run were measured on different GPUs ({devices}): "
                         "run the whole bench")
    order = {c: i for i, c in enumerate(m11.CONFIGS)}

    for part in ("tuned", "sweep", "picks", "bench", "ablation"):
        kept = [r for r in cap.get(part, []) if key_of(r) not in configs]
        cap[part] = sorted(kept + new[part], key=lambda r: order[key_of(r)])  # stable: each part's own order within
    (out / "capstone.json").write_text(json.dumps(cap, indent=1) + "\n")


def ablation_main(out: Path, source: str):
    """The ablation rows again, beside the kept results of results/capstone.json (same GPU model
    required): for a change to ABLATIONS without a new sweep. Writes DIR/capstone.json whole."""
    cap = json.loads((RESULTS / "capstone.json").read_text())
    device = benchmark.device_name()
    if {r.get("device") for r in cap["bench"]} != {device}:
        raise SystemExit(f"results/capstone.json was measured on another GPU than this {device}: run the whole bench")
    cap["ablation"] = []
    for t in cap["tuned"]:
        if t["dtype"] != "fp16":
            continue
        key = (t["dtype"], t["d"], t["causal"])
        cfg = {k: t[k] for k in m11.SPACE}
        kept = next(r["tflops"] for r in cap["bench"] if (r["dtype"], r["d"], r["causal"], r["S"]) == key + (SEQS[0],))
        cap["ablation"] += ablation(source, *key, cfg, kept)
    out.mkdir(parents=True, exist_ok=True)
    (out / "capstone.json").write_text(json.dumps(cap, indent=1) + "\n")


def emulator_main(source: str):
    """Every kept build (each configuration's, at each S) checked on the emulator's visible cases."""
    builds = {build(dtype, d, causal, cfg) for s in SEQS for (dtype, d, causal), cfg in m11.tuned_configs(s).items()}
    for ex_id in sorted(builds):
        result = run_check(ex_id, source)
        print(ex_id, "passed" if result.passed else result.first_failure.message, flush=True)
        if not result.passed:
            raise SystemExit(1)


def write_tuned() -> None:
    """The launch choices of results/capstone.json into the grader package (m11_capstone reads them there)."""
    m11.TUNED.write_text(json.dumps(m11.tuned_choices(json.loads((RESULTS / "capstone.json").read_text())), indent=1)
                         + "\n")
    print(f"wrote {m11.TUNED}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["emulator", "gpu", "tuned"],
                    help="tuned: write the package's launch choices (m11.TUNED) from results/capstone.json")
    ap.add_argument("--out", type=Path, default=Path("bench11_out"))
    ap.add_argument("--merge", action="store_true", help="merge the records into results/gpu_evidence.json")
    ap.add_argument("--source", type=Path, help="time this kernel file instead of the instructor notebook's")
    ap.add_argument("--dtypes", default="fp16,bf16", help="the configurations of these dtypes only")
    ap.add_argument("--ablation-only", action="store_true",
                    help="time only the ablation rows, at the choices and S = 4096 speeds of results/capstone.json")
    ap.add_argument("--seqs", default=",".join(map(str, SEQS)), help="sequence lengths the tuned kernel is timed at")
    ap.add_argument("--reuse-sweep", action="store_true",
                    help="take the S = 4096 sweep (and the ablation rows) from results/capstone.json instead of sweeping")
    ap.add_argument("--reuse-picks", action="store_true",
                    help="--reuse-sweep, and at each S the choices results/capstone.json's records kept there")
    ap.add_argument("--only", help="sweep and time these configurations only (dtype:d:causal, comma-separated, "
                    "e.g. fp16:128:1), kept beside the others of results/capstone.json (same GPU model required)")
    a = ap.parse_args()
    code = a.source.read_text() if a.source else solution_source("capstone_fwd_d64")
    if a.mode == "tuned":
        write_tuned()
    elif a.mode == "emulator":
        emulator_main(code)
    elif a.ablation_only:
        ablation_main(a.out, code)
    else:
        configs = [c for c in m11.CONFIGS if c[0] in a.dtypes.split(",")]
        if a.only:
            only = {(t, int(d), c == "1") for t, d, c in (o.split(":") for o in a.only.split(","))}
            configs = [c for c in configs if c in only]
        gpu_main(a.out, code, seqs=[int(s) for s in a.seqs.split(",")], configs=configs, reuse_sweep=a.reuse_sweep,
                 reuse_picks=a.reuse_picks)
        if a.only:
            merge_configs(a.out, set(configs))
        if a.merge:
            benchmark.merge_records(RESULTS / "gpu_evidence.json",
                                    json.loads((a.out / "capstone.json").read_text())["bench"])
            shutil.copy(a.out / "capstone.json", RESULTS / "capstone.json")
            write_tuned()

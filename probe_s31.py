"""Session probe (not committed): capstone d128 choices outside the tuned space, matmul SASS mix."""
import collections, json, os, re, subprocess, sys, time
from pathlib import Path
sys.path.insert(0, ".")
import grader
from grader import benchmark
from grader.benchmark import Budget
from grader.capstone import build
from grader.checks import REGISTRY
from grader.course import solution_source
from grader.exercises import m11_capstone as m11
from grader.kernel import RawKernel
from grader.source import translation_unit
OUT = Path(os.environ.get("OUT", "/tmp/out"))
res = {}

def sass(code, options, tag):
    tu = Path(f"/tmp/{tag}.cu"); tu.write_text(translation_unit(code))
    cubin = f"/tmp/{tag}.cubin"
    r = subprocess.run(["nvcc", "-cubin", "-arch=sm_90", "-O3", "-std=c++17", "-Igrader/include", *options, str(tu), "-o", cubin,
                        "-Xptxas", "-v"], capture_output=True, text=True)
    print(tag, "ptxas:", r.stderr.strip()[-400:], flush=True)
    if r.returncode: return
    s = subprocess.run(["cuobjdump", "-sass", cubin], capture_output=True, text=True).stdout
    (OUT / f"{tag}.sass").write_text(s)
    ops = collections.Counter(m.group(1).split(".")[0] for m in re.finditer(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_.]+)", s))
    print(tag, "static ops:", ops.most_common(25), flush=True)

# B: the matmul's SASS, exercise and tuned builds
mm = solution_source("mma_matmul_pipe")
sass(mm, [], "mm_default")
sass(mm, ["-DBN=256", "-DWARPS_N=4", "-DSTAGES=4"], "mm_tuned")

# A: capstone d128 fp16 configurations
src = solution_source("capstone_fwd_d64")
base = dict(WARPS=4, WARP_ROWS=32, TILE=64, STAGES=2, Q_IN_REGS=0, LAZY_RESCALE=1)
tries = [base, base | dict(TILE=32), base | dict(TILE=32, Q_IN_REGS=1), base | dict(TILE=32, Q_IN_REGS=1, STAGES=3),
         base | dict(TILE=32, STAGES=3), base | dict(Q_IN_REGS=1), base | dict(TILE=32, Q_IN_REGS=1, LAZY_RESCALE=0)]
rows = []
for causal in (False, True):
    for cfg in tries:
        ex_id = build("fp16", 128, causal, cfg)
        try:
            attrs = RawKernel(src, m11.KERNEL, options=REGISTRY[ex_id].options).compile()._compiled._kernel.attributes
            rep = grader.bench(ex_id, src, dtype="fp16", baselines=False, budget=Budget(min_runs=10, min_ms=150))
            row = dict(causal=causal, **cfg, ok=rep.check_passed, tflops=round(rep.kernel.tflops, 1), ms=rep.kernel.ms,
                       regs=int(attrs["num_regs"]), local=int(attrs["local_size_bytes"]))
        except Exception as e:
            row = dict(causal=causal, **cfg, error=str(e)[:200])
        print(row, flush=True); rows.append(row)
rep = grader.bench(build("fp16", 128, False, base), src, dtype="fp16")
print(rep.table(), flush=True)
(OUT / "probe.json").write_text(json.dumps(rows, indent=1))

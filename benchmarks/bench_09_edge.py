"""Where module 09's causal kernels decide to mask a tile: per block (the notebook's kernels), per
warp (`q0 + 16·warp`, which masks fewer tiles), and per warp with the warp index broadcast from
lane 0 by `__shfl_sync` (so that the compiler knows it is the same in all 32 lanes). Each causal
build of tc_flash_fwd_pipe, _swizzle and _ws, fp16, d = 64 and 128, checked on its grading cases,
then timed at B=4, H=16, S=4096, all three ways. Nothing else differs.

    PYTHONPATH=. GRADER_BACKEND=gpu python3 benchmarks/bench_09_edge.py OUT.json

Writes OUT.json: {"device", "records": [{kernel, dtype, d, edge, ms, tflops}]}.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_09_pipelines import build  # noqa: E402
from grader.course import solution_source  # noqa: E402
from grader.exercises import m09_pipelines as m09  # noqa: E402
from timed_variants import Timings  # noqa: E402

PER_BLOCK = "(CAUSAL && (j + 1) * TILE > q0);"
PER_WARP = "(CAUSAL && (j + 1) * TILE > q0 + warp * 16);"
WARP = "const int warp = threadIdx.x / 32,"
UNIFORM_WARP = "const int warp = __shfl_sync(FULL_MASK, threadIdx.x / 32, 0),"


def per_warp(source: str) -> str:
    if source.count(PER_BLOCK) != 1:
        raise SystemExit("the notebook's kernel no longer decides its edge tiles with the expected line")
    return source.replace(PER_BLOCK, PER_WARP)


def uniform_warp(source: str) -> str:
    if source.count(WARP) != 1:
        raise SystemExit("the notebook's kernel no longer computes its warp index with the expected line")
    return source.replace(WARP, UNIFORM_WARP)


def main(out: str) -> list:
    timings = Timings()
    for kernel in m09.KERNELS:
        source = solution_source(f"{kernel}_d64")
        for d in (64, 128):
            ex = build(kernel, "fp16", d, True)
            for edge, src in (("per block (notebook)", source), ("per warp", per_warp(source)),
                              ("per warp, warp index from __shfl_sync", uniform_warp(per_warp(source)))):
                timings.add(ex, src, "fp16", dict(kernel=kernel, dtype="fp16", d=d, edge=edge))
    return timings.write(out)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    main(sys.argv[1])

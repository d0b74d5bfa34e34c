"""The tuning spaces the course registers for its own exercises: each holds the exercise's graded
build, launches it as the exercise does, and turns away what the kernel cannot run."""
import dataclasses
import re
from types import SimpleNamespace

import pytest

from grader import autotune
from grader.checks import REGISTRY, get_exercise, run_check
from grader.course import solution_source
from grader.device import H100_SXM
from grader.exercises import m09_pipelines as m09
from grader.exercises import m11_capstone
from repo_scripts import load_script


def test_the_pipelined_matmul_space_holds_the_exercise_build_and_excludes_spilling_warp_tiles():
    ex = get_exercise("mma_matmul_pipe")
    space = autotune.SPACES["mma_matmul_pipe"]
    build = dict(BM=m09.GEMM_BM, BN=m09.GEMM_BN, WARPS_M=m09.GEMM_WARPS[0], WARPS_N=m09.GEMM_WARPS[1], BK=m09.GEMM_BK,
                 STAGES=m09.GEMM_STAGES)
    assert build in autotune.configurations(space) and space.exclude(build) is None
    p = SimpleNamespace(M=4096, N=4096, K=4096)
    assert (space.grid(p, build), space.block(p, build), space.shared_mem(p, build)) == (ex.grid(p), ex.block(p),
                                                                                        ex.shared_mem(p))
    assert "256 accumulator registers" in space.exclude(dict(build, BN=256))  # a 64 x 128 warp tile
    assert "not made of 16 x 16" in space.exclude(dict(build, BM=128, WARPS_M=16))


# --------------------------------------------------------------------------- the solutions at every tunable value

def _macros(options) -> dict:
    return dict(o[2:].split("=", 1) for o in options if o.startswith("-D") and "=" in o)


def _literal_defaults(source: str) -> dict:
    """``#ifndef NAME`` / ``#define NAME 3``: the value a build without -DNAME compiles (literals only)."""
    return dict(re.findall(r"#ifndef (\w+)\s*\n#define \1 (\d+)\b", source))


# The backward kernels have no tuning space, but bench_11_backward.py sweeps these choices (per part, every
# value of each choice it tries; "fused" is the dK/dV kernel with FUSED_DQ=1).
BACKWARD_SWEEP = {part: {name: sorted({c[name] for c in cfgs}) for name in cfgs[0] if name != "FUSED_DQ"}
                  for part, cfgs in load_script("benchmarks/bench_11_backward.py", "bench_11_backward_swept").SWEEP.items()}


def _covering_builds() -> list[tuple[str, object, str]]:
    """For each kernel with a tuning space, one build per (macro, value) of the space that no graded build
    compiles: the configuration with that value nearest the exercise's graded build (the space's exclusions
    and the shared-memory limit respected); for the backward kernels, one build per value the benchmark tries."""
    get_exercise("vector_add")
    builds, kernels = [], set()
    for ex_id, space in autotune.SPACES.items():
        ex = REGISTRY[ex_id]
        if ex.kernel in kernels:  # one space per kernel: its builds differ only in d, dtype or causal
            continue
        kernels.add(ex.kernel)
        defaults = _literal_defaults(solution_source(ex_id))
        graded = {}
        for other in REGISTRY.values():
            if other.kernel == ex.kernel:
                for k, v in (defaults | _macros(other.options)).items():
                    graded.setdefault(k, set()).add(str(v))
        base = {k: int(v) for k, v in (defaults | _macros(ex.options)).items() if k in space.params}
        p = SimpleNamespace(**ex.cases[0].params)

        def allowed(cfg):
            return not (space.exclude and space.exclude(cfg)) and space.shared_mem(p, cfg) <= H100_SXM.max_shared_per_block_optin

        for name, values in space.params.items():
            for value in values:
                if str(value) in graded.get(name, ()):
                    continue
                near = [c for c in autotune.configurations(space) if c[name] == value and allowed(c)]
                if near:  # a macro whose default is an expression (not in base) is left to it
                    cfg = min(near, key=lambda c: sum(base.get(k, v) != v for k, v in c.items()))
                    changed = "-".join(f"{k}{v}" for k, v in cfg.items() if k == name or base.get(k, v) != v)
                    if changed not in [c for e, _, c in builds if e == ex_id]:
                        builds.append((ex_id, autotune.variant(ex, space, cfg), changed))
    for part, params in BACKWARD_SWEEP.items():
        fused = part == "fused"
        base = dict(m11_capstone.BWD_CONFIG["dkdv"], **m11_capstone.FUSED_CONFIG) if fused else m11_capstone.BWD_CONFIG[part]
        for name, values in params.items():
            for value in values:
                if value != base[name]:
                    row = m11_capstone.bwd_variant("dkdv" if fused else part, 64, cfg={"FUSED_DQ": 1, name: value}
                                                   if fused else {name: value}, register=False)
                    builds.append((f"capstone_bwd_{'dkdv_fused' if fused else part}_d64", row, f"{name}{value}"))
    return builds


COVERING = _covering_builds()


@pytest.mark.parametrize("exercise_id, row, changed", COVERING, ids=[f"{e}-{changed}" for e, _, changed in COVERING])
def test_the_solution_passes_at_every_tunable_value(exercise_id, row, changed):
    """The tuner and the benchmarks compile builds the grading never does; the instructor's kernel must
    be right in each, or the timings they report are of a wrong kernel. One case: the pipeline's."""
    one = [c for c in row.cases if c.name == (row.race_case or row.cases[0].name)]
    result = run_check(dataclasses.replace(row, cases=one, race_check=False), solution_source(exercise_id),
                       backend="cpu", seed=0)
    assert result.passed, result.first_failure.message

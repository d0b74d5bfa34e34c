"""Why module 09's pipelined kernel loses to module 08's under the causal mask and wins without it:
Nsight Compute on one launch of each, fp16, d = 64, B=4, H=16, S=4096, causal and not.

    PYTHONPATH=. python3 benchmarks/profile_08_09.py --out DIR     # on the GPU machine, ncu on PATH

The metrics of benchmarks/ncu_metrics.py, as benchmarks/profile_capstone.py collects them: this file runs itself under
``ncu`` as the driver (``--launch``), launching module 08's tc_flash_fwd and module 09's
tc_flash_fwd_pipe (the notebooks' solutions, the graded launch shapes) once each. Writes
DIR/profile_08_09.json and a table, DIR/profile_08_09.txt (committed in benchmarks/results/).
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ncu_metrics import cli, collect, table as ncu_table  # noqa: E402

SHAPE = dict(B=4, H=16, S=4096, d=64)
KERNELS = {"08 tc_flash_fwd": "tc_flash_fwd", "09 tc_flash_fwd_pipe": "tc_flash_fwd_pipe"}


def launch(causal: bool):
    """The driver ncu profiles: each kernel once, as its exercise row launches it."""
    import cupy
    import numpy as np

    from grader.checks import get_exercise
    from grader.course import solution_source
    from grader.kernel import RawKernel

    b, h, n, d = SHAPE["B"], SHAPE["H"], SHAPE["S"], SHAPE["d"]
    rng = np.random.default_rng(0)
    q, k, v = (cupy.asarray(rng.standard_normal((b, h, n, d)).astype(np.float16)) for _ in range(3))
    p = type("P", (), dict(N=n, H=h, B=b, d=d, causal=causal))
    for kernel in KERNELS.values():
        ex = get_exercise(f"{kernel}{'_causal' if causal else ''}_d64")
        o = cupy.empty_like(q)
        lse = cupy.empty((b, h, n), cupy.float32)
        k_ = RawKernel(solution_source(ex.id), ex.kernel, options=ex.options, backend="gpu")
        smem = ex.shared_mem(p) if ex.shared_mem else 0
        if smem:
            k_.max_dynamic_shared_size_bytes = smem
        k_(ex.grid(p), ex.block(p), (q, k, v, o, lse, np.int32(n), np.float32(d ** -0.5)), shared_mem=smem)
        cupy.cuda.Device().synchronize()


def profile(ncu: str, causal: bool) -> dict:
    found = collect(ncu, __file__, str(int(causal)), "tc_flash_fwd",
                    lambda name: next(label for label, k in reversed(KERNELS.items()) if name.startswith(k)))
    if len(found) != len(KERNELS):
        raise SystemExit(f"ncu profiled {sorted(found)} for causal={causal}, not {sorted(KERNELS)}")
    return found


def table(results: dict) -> str:
    return ncu_table(results, KERNELS, "(fp16, d=64, B=4, H=16, S=4096)", 21)


if __name__ == "__main__":
    cli("profile_08_09", lambda spec: launch(bool(int(spec))),
        lambda exe: {("causal" if c else "not causal"): profile(exe, c) for c in (False, True)}, table)

"""Module 12 on a GPU: the same FA2 forward addressed four ways, and the solution with each of two speed
choices undone, each over a grid of configurations.

    GRADER_BACKEND=gpu python benchmarks/bench_12_variants.py [--quick] [--dtype fp16,bf16]
        [--variants pointers,descriptors,ws,two_stage] [--check] [--jobs N] [--out DIR]

Variants (``--variants`` takes the short names; the JSON and the reading use the long ones):

* ``pointers``: the course's solution kernel (notebooks/12_triton), pointer arithmetic and masks;
* ``descriptors``: the same loop with every tile loaded through ``tl.make_tensor_descriptor`` (TMA on
  Hopper) on a ``[B*H, N, d]`` view (contiguous tensors only), causal with a mask on every visited block;
* ``ws`` (``descriptors + warp_specialize``): that kernel with ``tl.range(..., warp_specialize=True)``;
* ``two_stage`` (``descriptors, two-stage causal``): ``TWO_STAGE_SOURCE`` below, a complete solution
  of the course's two forward exercises (the launchers ``flash_forward`` and ``flash_forward_causal``)
  written with ``[B, H, N, d]`` descriptors through each tensor's strides: causal in the solution's
  two stages (key blocks wholly below the diagonal without a mask, the diagonal blocks with it,
  nothing above), the ragged tail of a non-causal row masked in a stage of its own; the masked
  stages are not pipelined (``num_stages=1``: fewer registers; ptxas for sm_90a under triton 3.6 gives
  the 128 x 64, 4-warp, d = 128 build 16 (56 causal) bytes of spills instead of 84 (64)).
  ``--check`` first runs the module's two forward checks (hidden cases included) on that source;
* ``grid_order`` and ``scaled_scores``: the solution's kernel with one of its speed choices undone by an
  edit of its source (``ABLATIONS``; a stale edit stops the script): causal
  programs taken in the grid's own order instead of heaviest first, and every score multiplied by the
  scale before the row max instead of one FMA per score after it.

Configurations: ``BLOCK_M`` in {64, 128}, ``BLOCK_N`` in {64, 128} (at most ``BLOCK_M``), 4 or 8 warps
(8 only with ``BLOCK_M`` 128), 2-4 stages (15); ``--quick``: ``BLOCK_M`` 128, ``BLOCK_N`` 64 or 128,
4 or 8 warps, 2 or 3 stages, plus 64 x 64 with 4 warps and 3 stages (the pointer kernel's best in
three of the four rows of the full fp16 sweep): 9. B=4 H=16 S=4096, d 64/128, causal or not, per
``--dtype`` (default fp16).

Every configuration (and those the two launchers autotune over) is compiled first, in ``--jobs``
processes at once (into Triton's on-disk cache, which the timing process then reads), then run once
on a poisoned output and compared with SDPA's, then timed twice: ``ms``/``tflops`` by
``bench_12_triton.time_ms`` (CUDA events around batches of back-to-back launches, one round of the
main table's four, results/triton.txt) and ``do_bench_ms``/``do_bench_tflops`` by ``triton.testing.do_bench``
(L2 flushed before each launch). Per (dtype, d, causal) the same run also
times SDPA's flash backend and cuDNN, and the solution's own autotuned launcher (with the configuration
its autotuner chose), both with ``time_ms``. A configuration's best is by ``tflops``. Writes
``triton_variants.json`` (after every (dtype, d, causal), so a cut-short run keeps what it measured):
per (dtype, d, causal) the best of each variant, the baselines and every measurement (a failed compile
or launch is recorded with its error). Module 12's reading (section 9) shows its table.
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_12_triton import sdpa, time_ms, tuned_config  # noqa: E402  (as the main table times and calls)

SHAPE = dict(B=4, H=16, S=4096)
VARIANTS = {"pointers": "pointers", "descriptors": "descriptors", "ws": "descriptors + warp_specialize",
            "two_stage": "descriptors, two-stage causal", "grid_order": "pointers, the grid's order",
            "scaled_scores": "pointers, every score scaled"}
# (find, replace) edits of the solution's source, each find present exactly once
ABLATIONS = {
    "grid_order": [("    bh = tl.program_id(1)\n    if CAUSAL:\n", "    bh = tl.program_id(1)\n    if False:\n")],
    "scaled_scores": [
        ("        s = tl.dot(q, k)  #", "        s = tl.dot(q, k) * qk_scale  #"),
        ("tl.maximum(m_i, tl.max(s, 1) * qk_scale)", "tl.maximum(m_i, tl.max(s, 1))"),
        ("tl.exp2(s * qk_scale - shift[:, None])", "tl.exp2(s - shift[:, None])"),
    ],
}
DTYPES = ("fp16", "bf16")
FULL_GRID = tuple((bm, bn, w, st) for bm, bn, w, st in itertools.product((64, 128), (64, 128), (4, 8), (2, 3, 4))
                  if bn <= bm and not (bm == 64 and w == 8))
QUICK_GRID = tuple((128, bn, w, st) for bn in (64, 128) for w in (4, 8) for st in (2, 3)) + ((64, 64, 4, 3),)
DEVICE = "cuda"  # the tests run main() on "cpu" in Triton's interpreter, at a small SHAPE
MAX_ERR = 2e-2  # against SDPA's output; the right kernels are near 1e-4 (fp16) and 1e-3 (bf16)
LOG2E = 1.4426950408889634
TIMING = ("tflops: bench_12_triton.time_ms (CUDA events around 7 batches of 10 back-to-back launches after 300 ms "
          "of warm-up, the median batch), one of the four rounds of results/triton.txt; do_bench_tflops: "
          "triton.testing.do_bench("
          "warmup=10, rep=50), the L2 flushed before each launch")

TWO_STAGE_SOURCE = '''\
import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634


@triton.jit
def _attend(acc, l_i, m_i, q, qk_scale, kd, vd, b, h, rows, lo, hi, N,
            D: tl.constexpr, BLOCK_N: tl.constexpr, MASK_KEYS: tl.constexpr, CAUSAL_MASK: tl.constexpr):
    """Fold key blocks lo..hi into the running state (m_i, l_i, acc); scores are in base 2."""
    # the masked stages (the diagonal, the ragged tail: one or two blocks) are not pipelined: fewer registers
    for start in tl.range(lo, hi, BLOCK_N, num_stages=1 if MASK_KEYS else None):
        cols = start + tl.arange(0, BLOCK_N)
        k = kd.load([b, h, start, 0]).reshape(BLOCK_N, D)  # keys past N arrive as zeros
        s = tl.dot(q, k.T) * qk_scale  # log2(e) folded into the scale: exp2 below
        if MASK_KEYS:
            s = tl.where(cols[None, :] < N, s, -float("inf"))
        if CAUSAL_MASK:
            s = tl.where(cols[None, :] <= rows[:, None], s, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        # -inf - -inf is NaN: a row that has seen no key yet keeps shifting by 0
        shift = tl.where(m_new == -float("inf"), 0.0, m_new)
        p = tl.exp2(s - shift[:, None])
        alpha = tl.exp2(m_i - shift)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = vd.load([b, h, start, 0]).reshape(BLOCK_N, D)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _flash_fwd(Q, K, V, O, L, qk_scale, B, H, N,
               sqb, sqh, sqn, skb, skh, skn, svb, svh, svn, sob, soh, son, slb, slh, sln,
               D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    pid_m = tl.program_id(0)
    b = tl.program_id(1) // H
    h = tl.program_id(1) % H
    # [B, H, N, D] descriptors through each tensor's strides (the last must be 1, the others multiples of
    # 16 bytes): whole tiles copied (TMA on Hopper), rows past N loaded as zeros and never stored
    qd = tl.make_tensor_descriptor(Q, shape=[B, H, N, D], strides=[sqb, sqh, sqn, 1], block_shape=[1, 1, BLOCK_M, D])
    kd = tl.make_tensor_descriptor(K, shape=[B, H, N, D], strides=[skb, skh, skn, 1], block_shape=[1, 1, BLOCK_N, D])
    vd = tl.make_tensor_descriptor(V, shape=[B, H, N, D], strides=[svb, svh, svn, 1], block_shape=[1, 1, BLOCK_N, D])
    od = tl.make_tensor_descriptor(O, shape=[B, H, N, D], strides=[sob, soh, son, 1], block_shape=[1, 1, BLOCK_M, D])
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    q = qd.load([b, h, pid_m * BLOCK_M, 0]).reshape(BLOCK_M, D)
    m_i = tl.full((BLOCK_M,), -float("inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, D), tl.float32)
    if CAUSAL:
        # stage 1: key blocks wholly below the diagonal, no mask; stage 2: the diagonal blocks, masked
        diag = pid_m * BLOCK_M
        acc, l_i, m_i = _attend(acc, l_i, m_i, q, qk_scale, kd, vd, b, h, rows, 0, diag, N, D, BLOCK_N, False, False)
        acc, l_i, m_i = _attend(acc, l_i, m_i, q, qk_scale, kd, vd, b, h, rows, diag, tl.minimum(diag + BLOCK_M, N), N,
                                D, BLOCK_N, True, True)
    else:
        full = (N // BLOCK_N) * BLOCK_N
        acc, l_i, m_i = _attend(acc, l_i, m_i, q, qk_scale, kd, vd, b, h, rows, 0, full, N, D, BLOCK_N, False, False)
        acc, l_i, m_i = _attend(acc, l_i, m_i, q, qk_scale, kd, vd, b, h, rows, full, N, N, D, BLOCK_N, True, False)
    od.store([b, h, pid_m * BLOCK_M, 0], (acc / l_i[:, None]).to(O.dtype.element_ty).reshape(1, 1, BLOCK_M, D))
    tl.store(L + b * slb + h * slh + rows * sln, (m_i + tl.log2(l_i)) / 1.4426950408889634, mask=rows < N)


CONFIGS = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
           for bm, bn, w, s in [(128, 64, 4, 2), (128, 64, 8, 3), (64, 64, 4, 3)]]
_flash_fwd_tuned = triton.autotune(CONFIGS, key=["N", "D", "CAUSAL"])(_flash_fwd)


def _launch(q, k, v, o, lse, scale, causal):
    B, H, N, D = q.shape
    args = (q, k, v, o, lse, scale * LOG2E, B, H, N, *q.stride()[:3], *k.stride()[:3], *v.stride()[:3],
            *o.stride()[:3], *lse.stride())
    if q.is_cuda:
        # a descriptor made inside a kernel lives in global scratch memory that Triton asks for at launch
        triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device=q.device))
        grid = lambda meta: (triton.cdiv(N, meta["BLOCK_M"]), B * H)  # noqa: E731
        _flash_fwd_tuned[grid](*args, D=D, CAUSAL=causal)
    else:  # Triton's CPU interpreter: one configuration, nothing to tune
        _flash_fwd[(triton.cdiv(N, 64), B * H)](*args, D=D, BLOCK_M=64, BLOCK_N=64, CAUSAL=causal)


def flash_forward(q, k, v, o, lse, scale):
    _launch(q, k, v, o, lse, scale, False)


def flash_forward_causal(q, k, v, o, lse, scale):
    _launch(q, k, v, o, lse, scale, True)
'''


def solution_module():
    """The notebook's forward solution as a module, loaded as the checks load a cell (grader.triton_support:
    a file named after the source's hash, so every process compiles the same kernels under the same keys)."""
    from grader.course import solution_source
    from grader.triton_support import load_module

    return load_module(solution_source("triton_flash_forward"), "flash_forward")[0]


def ablation_source(variant: str) -> str:
    """The solution's forward source with ``ABLATIONS[variant]`` applied (a stale edit raises StaleEdit)."""
    from grader.course import solution_source
    from grader.wrong_corpus import replace_each_once

    return replace_each_once(solution_source("triton_flash_forward"), ABLATIONS[variant], f"ablation {variant!r}")


def ablation_modules() -> dict:
    from grader.triton_support import load_module

    return {v: load_module(ablation_source(v), "flash_forward")[0] for v in ABLATIONS}


def two_stage_module():
    from grader.triton_support import load_module

    return load_module(TWO_STAGE_SOURCE, "flash_forward")[0]


def descriptor_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def fwd_desc(Q, K, V, O, L, qk_scale, N, H, B, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 CAUSAL: tl.constexpr, WS: tl.constexpr):
        pid_m = tl.program_id(0)
        bh = tl.program_id(1)
        # [B*H, N, D] views of contiguous tensors; the descriptor zero-fills rows past N
        qd = tl.make_tensor_descriptor(Q, shape=[B * H, N, D], strides=[N * D, D, 1], block_shape=[1, BLOCK_M, D])
        kd = tl.make_tensor_descriptor(K, shape=[B * H, N, D], strides=[N * D, D, 1], block_shape=[1, BLOCK_N, D])
        vd = tl.make_tensor_descriptor(V, shape=[B * H, N, D], strides=[N * D, D, 1], block_shape=[1, BLOCK_N, D])
        od = tl.make_tensor_descriptor(O, shape=[B * H, N, D], strides=[N * D, D, 1], block_shape=[1, BLOCK_M, D])
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        q = qd.load([bh, pid_m * BLOCK_M, 0]).reshape(BLOCK_M, D)
        m_i = tl.full((BLOCK_M,), -float("inf"), tl.float32)
        l_i = tl.zeros((BLOCK_M,), tl.float32)
        acc = tl.zeros((BLOCK_M, D), tl.float32)
        hi = tl.minimum((pid_m + 1) * BLOCK_M, N) if CAUSAL else N
        for start in tl.range(0, hi, BLOCK_N, warp_specialize=WS):
            k = kd.load([bh, start, 0]).reshape(BLOCK_N, D)
            s = tl.dot(q, k.T) * qk_scale
            cols = start + tl.arange(0, BLOCK_N)
            if CAUSAL:
                s = tl.where(cols[None, :] <= rows[:, None], s, -float("inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            p = tl.exp2(s - m_new[:, None])
            alpha = tl.exp2(m_i - m_new)
            l_i = l_i * alpha + tl.sum(p, 1)
            v = vd.load([bh, start, 0]).reshape(BLOCK_N, D)
            acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
            m_i = m_new
        od.store([bh, pid_m * BLOCK_M, 0], (acc / l_i[:, None]).to(O.dtype.element_ty).reshape(1, BLOCK_M, D))
        tl.store(L + bh * N + rows, (m_i + tl.log2(l_i)) / 1.4426950408889634, mask=rows < N)

    return fwd_desc


def kernels(solution=None, two_stage=None, ablations=None) -> dict:
    """The JIT function each variant launches: the kernels of the solution's module, of the two-stage
    module and of the ablations (loaded here unless given), and the descriptor kernel."""
    desc = descriptor_kernel()
    ablated = {v: m._flash_fwd for v, m in (ablations or ablation_modules()).items()}
    return dict(pointers=(solution or solution_module())._flash_fwd, descriptors=desc, ws=desc,
                two_stage=(two_stage or two_stage_module())._flash_fwd, **ablated)


def contiguous_strides(shape) -> tuple:
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= n
    return tuple(reversed(out))


def launch_spec(kern: dict, variant: str, t: dict, B: int, H: int, S: int, d: int, causal: bool, cfg: tuple):
    """(jit function, positional args, keyword args, grid) of one variant at one configuration. ``t``
    holds q, k, v, o, lse: tensors, or (for compiling only) their torch dtypes; all are contiguous
    [B, H, S, d] and [B, H, S], so the strides come from the shape."""
    bm, bn, w, st = cfg
    sq, sl = contiguous_strides((B, H, S, d)), contiguous_strides((B, H, S))
    tensors = (t["q"], t["k"], t["v"], t["o"], t["lse"])
    scale = d ** -0.5 * LOG2E
    kw = dict(D=d, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=causal, num_warps=w, num_stages=st)
    if variant == "pointers" or variant in ABLATIONS:
        args = (*tensors, scale, S, H, *sq, *sq, *sq, *sq, *sl)
    elif variant in ("descriptors", "ws"):
        args = (*tensors, scale, S, H, B)
        kw["WS"] = variant == "ws"
    elif variant == "two_stage":
        args = (*tensors, scale, B, H, S, *sq[:3], *sq[:3], *sq[:3], *sq[:3], *sl)
    else:
        raise ValueError(f"unknown variant {variant!r}: one of {', '.join(VARIANTS)}")
    return kern[variant], args, kw, (math.ceil(S / bm), B * H)


_WORKER: dict = {}


def _compile_one(job) -> str | None:
    """In a worker process: compile one (variant, dtype, d, causal, configuration) into Triton's cache."""
    variant, dtype, d, causal, cfg = job
    try:
        import torch

        if "kern" not in _WORKER:
            _WORKER["kern"] = kernels()
        tdt = getattr(torch, {"fp16": "float16", "bf16": "bfloat16"}[dtype])
        t = dict(q=tdt, k=tdt, v=tdt, o=tdt, lse=torch.float32)  # warmup() takes dtypes for tensors
        B, H, S = SHAPE["B"], SHAPE["H"], SHAPE["S"]
        fn, args, kw, grid = launch_spec(_WORKER["kern"], variant, t, B, H, S, d, causal, cfg)
        fn.warmup(*args, grid=grid, **kw)
        return None
    except Exception as err:  # noqa: BLE001  (recorded again, with its message, when the timing run compiles it)
        return f"{type(err).__name__}"


def precompile(jobs: list, workers: int) -> dict:
    """Compile every job in ``workers`` fresh processes (Triton's compiler holds the GIL for most of its
    work); the timing process then loads each kernel from the on-disk cache. Returns counts."""
    if workers <= 1 or not jobs:
        return dict(jobs=len(jobs), workers=0, failed=0, seconds=0.0)
    import multiprocessing as mp

    t0 = time.time()
    failed = 0
    try:
        with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn")) as pool:
            for why in pool.map(_compile_one, jobs, chunksize=max(1, len(jobs) // (4 * workers))):
                failed += why is not None
    except Exception as err:  # noqa: BLE001  (a broken pool only costs time: the timing run compiles in turn)
        print(f"precompile stopped ({type(err).__name__}: {err}); compiling in the timing process", flush=True)
    return dict(jobs=len(jobs), workers=workers, failed=failed, seconds=round(time.time() - t0, 1))


def sync(torch) -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def do_bench(triton, fn) -> float:
    return triton.testing.do_bench(fn, warmup=10, rep=50)


def autotune_configs(module) -> list:
    """The (BLOCK_M, BLOCK_N, num_warps, num_stages) a module's ``CONFIGS`` list autotunes over."""
    return [(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps, c.num_stages)
            for c in getattr(module, "CONFIGS", [])]


def error_text(err: Exception) -> str:
    text = str(err).splitlines()[0][:160] if str(err) else ""
    return f"{type(err).__name__}: {text}"


def parse_list(text: str, allowed, what: str) -> list:
    items = [s.strip() for s in text.split(",") if s.strip()]
    bad = [s for s in items if s not in allowed]
    if bad or not items:
        raise SystemExit(f"--{what}: {', '.join(bad) or 'nothing given'}: choose from {', '.join(allowed)}")
    return items


def run_checks(source: str) -> dict:
    """The module's two forward checks (hidden cases too) on ``source``, on this machine's backend."""
    from grader.checks import run_check

    out = {}
    for ex_id in ("triton_flash_forward", "triton_flash_forward_causal"):
        r = run_check(ex_id, source, include_hidden=True, seed=1234)
        out[ex_id] = dict(passed=r.passed, cases=len(r.results))
        print(r.summary().splitlines()[-1], flush=True)
        if not r.passed:
            print(r.first_failure.message, flush=True)
            out[ex_id]["failure"] = r.first_failure.message
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", str(ROOT / "benchmarks" / "results")))
    ap.add_argument("--dtype", default="fp16", help="comma-separated: fp16, bf16")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated: " + ", ".join(VARIANTS))
    ap.add_argument("--quick", action="store_true", help="9 configurations instead of 15 (see the docstring)")
    ap.add_argument("--check", action="store_true", help="run the module's forward checks on the two-stage "
                    "descriptor source first")
    ap.add_argument("--jobs", type=int, default=min(16, os.cpu_count() or 1),
                    help="processes compiling the configurations before the timing (1: compile while timing)")
    a = ap.parse_args(argv)
    dtypes = parse_list(a.dtype, DTYPES, "dtype")
    variants = parse_list(a.variants, VARIANTS, "variants")
    grid_cfgs = QUICK_GRID if a.quick else FULL_GRID
    os.environ.setdefault("GRADER_BACKEND", "gpu")
    import torch
    import triton
    from torch.nn.attention import SDPBackend

    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device=DEVICE))
    B, H, S = SHAPE["B"], SHAPE["H"], SHAPE["S"]
    cases = list(itertools.product(dtypes, (64, 128), (False, True)))
    command = "GRADER_BACKEND=gpu python benchmarks/bench_12_variants.py " + " ".join(
        x for x in [("--quick" if a.quick else ""), f"--dtype {','.join(dtypes)}", f"--variants {','.join(variants)}",
                    ("--check" if a.check else "")] if x)
    device = torch.cuda.get_device_name() if DEVICE == "cuda" else f"{DEVICE} (Triton's interpreter)"
    out = dict(device=device, triton=triton.__version__, torch=torch.__version__,
               command=command, shape=SHAPE, dtypes=dtypes, grid="quick" if a.quick else "full",
               variants=[VARIANTS[v] for v in variants], timing=TIMING, configs=[])
    path = Path(a.out) / "triton_variants.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    t_start = time.time()
    if a.check:
        out["two_stage_checks"] = run_checks(TWO_STAGE_SOURCE)
    # their files written before the compiling processes read them
    ff, ts, ab = solution_module(), two_stage_module(), ablation_modules()
    kern = kernels(ff, ts, ab)
    # every configuration of the grid, and those the two launchers autotune over
    per_variant = {var: list(grid_cfgs) for var in variants}
    for var, module in (("pointers", ff), ("two_stage", ts)):
        if var == "pointers" or var in variants:
            per_variant.setdefault(var, [])
            per_variant[var] += [c for c in autotune_configs(module) if c not in per_variant[var]]
    jobs = [(var, dt, d, c, cfg) for dt, d, c in cases for var, cfgs in per_variant.items() for cfg in cfgs]
    out["precompile"] = precompile(jobs, a.jobs)
    print(f"precompiled {out['precompile']}", flush=True)
    for dtype_name, d, causal in cases:
        dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype_name]
        g = torch.Generator(device=DEVICE).manual_seed(0)
        q, k, v = (torch.randn(B, H, S, d, device=DEVICE, dtype=dtype, generator=g) for _ in range(3))
        o, lse = torch.empty_like(q), torch.empty(B, H, S, device=DEVICE)
        t = dict(q=q, k=k, v=v, o=o, lse=lse)
        flops = 4.0 * B * H * S * S * d / (2 if causal else 1)
        ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        entry = dict(dtype=dtype_name, d=d, causal=causal, baselines={}, launchers={}, best={}, runs=[])
        for name, backend in (("sdpa_flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            run, why = sdpa(torch, backend, q, k, v, causal)
            if run is None:
                entry["baselines"][name] = dict(refused=why)
                continue
            ms, _ = time_ms(torch, run)
            entry["baselines"][name] = dict(ms=round(ms, 4), tflops=round(flops / ms / 1e9, 1))
        for name, module in (("solution", ff), ("two_stage", ts)):
            if name == "two_stage" and "two_stage" not in variants:
                continue
            run = lambda: module._launch(q, k, v, o, lse, d ** -0.5, causal)  # noqa: E731
            try:
                o.fill_(float("nan"))
                run()
                sync(torch)
                err = float((o.float() - ref.float()).abs().max())
                ms, _ = time_ms(torch, run)
                entry["launchers"][name] = dict(ms=round(ms, 4), tflops=round(flops / ms / 1e9, 1),
                                                config=tuned_config(module), max_abs_err_vs_sdpa=err)
            except Exception as err:  # noqa: BLE001
                entry["launchers"][name] = dict(error=error_text(err))
        for variant, cfg in itertools.product(variants, grid_cfgs):
            bm, bn, w, st = cfg
            fn_jit, args, kw, grid = launch_spec(kern, variant, t, B, H, S, d, causal, cfg)
            fn = lambda: fn_jit[grid](*args, **kw)  # noqa: E731
            row = dict(variant=VARIANTS[variant], BLOCK_M=bm, BLOCK_N=bn, num_warps=w, num_stages=st)
            try:
                o.fill_(float("nan"))  # a launch that writes nothing must not pass on the last one's output
                fn()
                sync(torch)
                row["max_abs_err_vs_sdpa"] = float((o.float() - ref.float()).abs().max())
                ms, _ = time_ms(torch, fn)
                row.update(ms=round(ms, 4), tflops=round(flops / ms / 1e9, 1))
                bms = do_bench(triton, fn)
                row.update(do_bench_ms=round(bms, 4), do_bench_tflops=round(flops / bms / 1e9, 1))
            except Exception as err:  # noqa: BLE001  (a configuration that does not compile or fit is recorded)
                row["error"] = error_text(err)
            entry["runs"].append(row)
        for variant in variants:
            name = VARIANTS[variant]
            ok = [r for r in entry["runs"] if r["variant"] == name and "tflops" in r
                  and r["max_abs_err_vs_sdpa"] < MAX_ERR]
            entry["best"][name] = max(ok, key=lambda r: r["tflops"]) if ok else None
        out["configs"].append(entry)
        out["seconds"] = round(time.time() - t_start, 1)
        path.write_text(json.dumps(out, indent=1) + "\n")
        print(summary_line(entry), flush=True)
        del q, k, v, o, lse, ref, t
        if DEVICE == "cuda":
            torch.cuda.empty_cache()
    print(f"wrote {path} in {out['seconds']} s", flush=True)


def summary_line(entry: dict) -> str:
    """One line per (dtype, d, causal): each variant's best (events TFLOP/s and configuration), its ratio
    to SDPA flash and cuDNN, and the launchers'."""
    base = {k: b.get("tflops") for k, b in entry["baselines"].items()}
    parts = [f"{entry['dtype']} d={entry['d']} causal={entry['causal']}:",
             f"SDPA flash {base.get('sdpa_flash')}, cuDNN {base.get('cudnn')};"]

    def ratios(tf):
        return "".join(f" {tf / base[k]:.2f}x {label}" for k, label in (("sdpa_flash", "flash"), ("cudnn", "cuDNN"))
                       if base.get(k))
    for name, r in entry["launchers"].items():
        tail = ratios(r["tflops"]) if "tflops" in r else f" {r.get('error')}"
        parts.append(f"{name} launcher {r.get('tflops')} ({r.get('config')}){tail};")
    for name, b in entry["best"].items():
        if b is None:
            parts.append(f"{name}: none;")
        else:
            parts.append(f"{name} {b['tflops']} ({b['BLOCK_M']}x{b['BLOCK_N']} w{b['num_warps']} s{b['num_stages']}, "
                         f"do_bench {b.get('do_bench_tflops')}){ratios(b['tflops'])};")
    return " ".join(parts)


if __name__ == "__main__":
    main()

"""Module 12 on a GPU: the same FA2 forward addressed three ways, each over a grid of configurations.

    GRADER_BACKEND=gpu python benchmarks/bench_12_variants.py [--out DIR]

* ``pointers``: the course's solution kernel (notebooks/12_triton), pointer arithmetic and masks;
* ``descriptors``: the same loop with every tile loaded through ``tl.make_tensor_descriptor`` (TMA on
  Hopper), causal with a mask on every visited block;
* ``descriptors + warp_specialize``: that kernel with ``tl.range(..., warp_specialize=True)``.

fp16, B=4 H=16 S=4096, d 64/128, causal or not; ``BLOCK_M`` in {64, 128}, ``BLOCK_N`` in {64, 128}
(at most ``BLOCK_M``), 4 or 8 warps, 2-4 stages; each timed with ``triton.testing.do_bench`` after a
check against SDPA's output. Writes ``triton_variants.json``: per configuration the best of each
variant, and every measurement (a failed compile is recorded with its error). Module 12's reading
(section 9) shows its table.
"""
from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHAPE = dict(B=4, H=16, S=4096)
VARIANTS = ("pointers", "descriptors", "descriptors + warp_specialize")
LOG2E = 1.4426950408889634


def solution_module():
    from grader.course import solution_source

    path = Path(tempfile.mkdtemp()) / "flash_forward_solution.py"
    path.write_text(solution_source("triton_flash_forward"))
    spec = importlib.util.spec_from_file_location("flash_forward_solution", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", str(ROOT / "benchmarks" / "results")))
    a = ap.parse_args()
    os.environ.setdefault("GRADER_BACKEND", "gpu")
    import torch
    import triton

    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    ff, fwd_desc = solution_module(), descriptor_kernel()
    B, H, S = SHAPE["B"], SHAPE["H"], SHAPE["S"]
    out = dict(device=torch.cuda.get_device_name(), triton=triton.__version__, torch=torch.__version__,
               command="GRADER_BACKEND=gpu python benchmarks/bench_12_variants.py", shape=SHAPE, configs=[])
    for d, causal in itertools.product((64, 128), (False, True)):
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (torch.randn(B, H, S, d, device="cuda", dtype=torch.float16, generator=g) for _ in range(3))
        o, lse = torch.empty_like(q), torch.empty(B, H, S, device="cuda")
        flops = 4.0 * B * H * S * S * d / (2 if causal else 1)
        ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        runs = []
        for variant, bm, bn, w, st in itertools.product(VARIANTS, (64, 128), (64, 128), (4, 8), (2, 3, 4)):
            if bn > bm or (bm == 64 and w == 8):
                continue
            grid = (triton.cdiv(S, bm), B * H)
            if variant == "pointers":
                args = (q, k, v, o, lse, d ** -0.5 * LOG2E, S, H, *q.stride(), *k.stride(), *v.stride(), *o.stride(),
                        *lse.stride())
                fn = lambda: ff._flash_fwd[grid](*args, D=d, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=causal,  # noqa: E731
                                                 num_warps=w, num_stages=st)
            else:
                fn = lambda: fwd_desc[grid](q, k, v, o, lse, d ** -0.5 * LOG2E, S, H, B, D=d, BLOCK_M=bm,  # noqa: E731
                                            BLOCK_N=bn, CAUSAL=causal, WS=variant.endswith("warp_specialize"),
                                            num_warps=w, num_stages=st)
            row = dict(variant=variant, BLOCK_M=bm, BLOCK_N=bn, num_warps=w, num_stages=st)
            try:
                fn()
                torch.cuda.synchronize()
                row["max_abs_err_vs_sdpa"] = float((o.float() - ref.float()).abs().max())
                ms = triton.testing.do_bench(fn, warmup=10, rep=50)
                row.update(ms=round(ms, 4), tflops=round(flops / ms / 1e9, 1))
            except Exception as err:  # noqa: BLE001  (a configuration that does not compile or fit is recorded)
                row["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:160] if str(err) else ''}"
            runs.append(row)
        best = {}
        for variant in VARIANTS:
            ok = [r for r in runs if r["variant"] == variant and "tflops" in r and r["max_abs_err_vs_sdpa"] < 2e-2]
            best[variant] = max(ok, key=lambda r: r["tflops"]) if ok else None
        out["configs"].append(dict(d=d, causal=causal, best=best, runs=runs))
        print(d, causal, {k: (b["tflops"], b["BLOCK_M"], b["BLOCK_N"], b["num_warps"], b["num_stages"]) if b else None
                          for k, b in best.items()}, flush=True)
    Path(a.out).mkdir(parents=True, exist_ok=True)
    (Path(a.out) / "triton_variants.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()

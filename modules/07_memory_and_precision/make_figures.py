"""Figures of module 07: python modules/07_memory_and_precision/make_figures.py

1. roofline.png: the H100's roofline (datasheet peaks) with the attention forward kernels measured
   on it (benchmarks/results/gpu_evidence.json, `bench` records at B=4, H=16, S=4096).
2. bank_map.png: which bank each of the 16 lanes of a score row reads when the K tile's rows are
   d floats apart, d + 1 floats apart, or XOR-swizzled (from the address formulas).
3. bank_profile.png: shared-memory wavefronts per request of module 04's flash_fwd_fa2 and of
   module 07's padded and swizzled versions, counted by the emulator's profiler (needs clang-16).
4. half_precision.png: relative rounding error of fp16 and bf16 from 1e-9 to 1e6.

It also prints every number the reading quotes.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "modules"))
sys.path.insert(0, str(ROOT))
from figstyle import BLUE, GREEN, GREY, ORANGE, PURPLE, RED, despine, saver  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).resolve().parent
RESULTS = ROOT / "benchmarks" / "results"
save = saver(HERE / "img")

# NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column: HBM3 3.35 TB/s, FP16 tensor 1,979 TFLOPS
# "with sparsity" (989 dense), FP32 67 TFLOPS.
HBM_TBS = 3.35
FP16_TENSOR_TFLOPS = 989.0
FP32_TFLOPS = 67.0
ITEMSIZE = {"fp32": 4, "fp16": 2, "bf16": 2}
SHAPE = dict(B=4, H=16, S=4096)


def attention_intensity(rec: dict) -> float:
    """FLOPs per byte of the attention forward with each of Q, K, V, O crossing memory once and L
    written (grader/benchspec.py's convention): 4·B·H·S²·d / (e·4·B·H·S·d + 4·B·H·S)."""
    heads, s, d = rec["B"] * rec["H"], rec["S"], rec["d"]
    flops = 4.0 * heads * s * s * d * (0.5 if rec["causal"] else 1.0)
    return flops / (ITEMSIZE[rec["dtype"]] * 4 * heads * s * d + 4 * heads * s)


def on_tensor_cores(rec: dict) -> bool:
    """Only the tc_* kernels use tensor cores; the course's fp16 kernel computes on CUDA cores in fp32."""
    return rec["kernel"].startswith("tc_")


def measured() -> list[dict]:
    """Non-causal forward records at the benchmark shape, one per kernel and head dimension."""
    bench = json.loads((RESULTS / "gpu_evidence.json").read_text())["bench"]
    keep = ("flash_fwd_row", "flash_fwd_fa2", "flash_fwd_fa2_padded", "flash_fwd_half_d64", "flash_fwd_half_d128",
            "tc_flash_fwd_d64", "tc_flash_fwd_d128")
    return [r for r in bench if r["kernel"] in keep and not r["causal"] and all(r.get(k) == v for k, v in SHAPE.items())]


def fig_roofline(records) -> None:
    fig, ax = plt.subplots(figsize=(7.0, 4.4))
    x = np.logspace(-1, 4, 200)
    ax.plot(x, np.minimum(FP16_TENSOR_TFLOPS, HBM_TBS * x), color=PURPLE, lw=1.5, label="fp16 tensor cores (989 TFLOP/s)")
    ax.plot(x, np.minimum(FP32_TFLOPS, HBM_TBS * x), color=ORANGE, lw=1.5, label="fp32 CUDA cores (67 TFLOP/s)")
    ax.plot([], [], "o", color=ORANGE, label="course kernels: fp32 math on CUDA cores (fp32 or fp16 I/O)")
    ax.plot([], [], "s", color=PURPLE, label="tc_flash_fwd: tensor cores (fp16/bf16)")
    ax.text(0.15, HBM_TBS * 0.15 * 1.6, "HBM 3.35 TB/s", rotation=33, fontsize=8, color="0.3")
    named = set()
    for r in sorted(records, key=lambda r: -r["tflops"]):
        ai = attention_intensity(r)
        marker = "o" if r["kernel"].startswith("flash") else "s"
        ax.plot(ai, r["tflops"], marker, color=PURPLE if on_tensor_cores(r) else ORANGE, ms=6)
        family = r["kernel"].removesuffix(f"_d{r['d']}")
        if family not in named:  # d = 64 and 128 (and fp16, bf16) sit almost on one spot: name the family once
            named.add(family)
            ax.annotate(f"{family} (d 64, 128)", (ai, r["tflops"]), textcoords="offset points", xytext=(-6, 4),
                        fontsize=7, ha="right")
        if r.get("baseline_tflops"):
            ax.plot(ai, r["baseline_tflops"], "x", color=GREEN, ms=6)
    ax.plot([], [], "x", color=GREEN, label="PyTorch SDPA, same dtype and shape")
    ax.set_xscale("log"); ax.set_yscale("log")
    ax.set_xlim(0.1, 1e4); ax.set_ylim(0.3, 3000)
    ax.set_xlabel("FLOPs per byte of compulsory traffic"); ax.set_ylabel("TFLOP/s")
    ax.set_title("H100 roofline, attention forward at B=4, H=16, S=4096 (measured)")
    ax.legend(fontsize=7, loc="upper left"); despine(ax); fig.tight_layout()
    save(fig, "roofline.png")


def banks(layout: str, d: int, c: int) -> list[int]:
    """The bank of K[x][c] for the 16 lanes x of a score row."""
    if layout == "stride d":
        return [(x * d + c) % 32 for x in range(16)]
    if layout == "stride d + 1":
        return [(x * (d + 1) + c) % 32 for x in range(16)]
    return [(x * d + (c ^ x)) % 32 for x in range(16)]


def fig_bank_map(d: int = 64, c: int = 5) -> None:
    layouts = ("stride d", "stride d + 1", "swizzle c ^ r")
    fig, axes = plt.subplots(1, 3, figsize=(8.4, 2.9), sharey=True)
    for ax, layout in zip(axes, layouts):
        grid = np.zeros((16, 32))
        for lane, bank in enumerate(banks(layout, d, c)):
            grid[lane, bank] = 1
        ax.imshow(grid, cmap=plt.matplotlib.colors.ListedColormap(["white", BLUE]), aspect="auto")
        ax.set_xticks(np.arange(-0.5, 32, 1), minor=True); ax.set_yticks(np.arange(-0.5, 16, 1), minor=True)
        ax.grid(which="minor", color=GREY, lw=0.4); ax.tick_params(which="minor", length=0)
        used = len(set(banks(layout, d, c)))
        ax.set_title(f"{layout}: {used} bank{'s' if used > 1 else ''}\n{16 // used} wavefront(s)", fontsize=9)
        ax.set_xlabel("bank")
    axes[0].set_ylabel("lane x (key of the tile)")
    fig.suptitle(f"K[x][c] for c = {c}, d = {d}: the 16 lanes of one score row", fontsize=9)
    fig.tight_layout()
    save(fig, "bank_map.png")


def profiled(n: int = 64, d: int = 64) -> dict:
    """Emulator profiles of the three fa2 versions on one head; None if the profiler is missing."""
    from grader import reference as ref
    from grader.backend import set_backend
    from grader.course import cuda_cells, notebook_of, solution_source
    from grader.emulator import _toolchain
    from grader.kernel import RawKernel

    if _toolchain.clang() is None:
        return {}
    set_backend("cpu")
    cells = cuda_cells(notebook_of("07_memory_and_precision"))
    versions = {"module 04 flash_fwd_fa2": (solution_source("flash_fwd_fa2"), "flash_fwd_fa2", d),
                "padded (d + 1)": (cells["flash_fwd_fa2_padded"], "flash_fwd_fa2_padded", d + 1),
                "swizzled (c ^ r)": (cells["flash_fwd_fa2_swizzled"], "flash_fwd_fa2_swizzled", d)}
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 1, n, d)).astype(np.float32) for _ in range(3))
    scale = np.float32(d ** -0.5)
    want = ref.attention_forward(q, k, v, scale=float(scale))[0]
    out = {}
    for label, (src, name, ld) in versions.items():
        o, lse = np.full((1, 1, n, d), np.nan, np.float32), np.full((1, 1, n), np.nan, np.float32)
        rep = RawKernel(src, name, backend="cpu")((n // 16, 1, 1), (16, 16), (q, k, v, o, lse, np.int32(n), np.int32(d), scale),
                                                  shared_mem=4 * (4 * 16 * ld + 16 * 16 + 32), profile=True)
        assert np.abs(o - want).max() < 1e-5, label
        loads = [r for r in rep.profile.rows if r.space == "shared" and r.op == "load"]
        score = max(loads, key=lambda r: r.units)
        t = rep.profile.totals
        out[label] = dict(requests=t["shared_load_requests"], wavefronts=t["shared_load_wavefronts"],
                          ideal=sum(r.ideal for r in loads), score_line=score.per_request)
    return out


def fig_bank_profile(prof: dict) -> None:
    labels = list(prof)
    fig, ax = plt.subplots(figsize=(6.4, 3.4))
    per = [prof[k]["wavefronts"] / prof[k]["requests"] for k in labels]
    score = [prof[k]["score_line"] for k in labels]
    xs = np.arange(len(labels))
    ax.bar(xs - 0.2, per, 0.4, color=BLUE, label="all shared loads")
    ax.bar(xs + 0.2, score, 0.4, color=RED, label="the score line (Q·K)")
    for x, a, b in zip(xs, per, score):
        ax.text(x - 0.2, a, f"{a:.2f}", ha="center", va="bottom", fontsize=8)
        ax.text(x + 0.2, b, f"{b:.1f}", ha="center", va="bottom", fontsize=8)
    ax.axhline(1.0, color="0.4", ls=":", lw=1)
    ax.set_xticks(xs, labels, fontsize=8); ax.set_ylabel("wavefronts per request")
    ax.set_title("Shared-memory loads, emulator profile (N = 64, d = 64, one head)", fontsize=9)
    ax.legend(fontsize=8); despine(ax); fig.tight_layout()
    save(fig, "bank_profile.png")


def rounding_errors():
    from grader.arrays import bf16_bits

    x = np.logspace(-9, 6, 3001).astype(np.float32)
    with np.errstate(over="ignore"):
        h = x.astype(np.float16).astype(np.float64)
    b = (bf16_bits(x).astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    with np.errstate(invalid="ignore"):
        return x, {"fp16": (h, np.abs(h - x) / x), "bf16": (b, np.abs(b - x) / x)}


def fig_half_precision(x, err) -> None:
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for (name, (_, e)), color in zip(err.items(), (BLUE, ORANGE)):
        ax.plot(x, np.where(np.isfinite(e), np.maximum(e, 1e-9), np.nan), ".", ms=1.2, color=color, label=name)
    ax.axvline(65504, color="0.5", ls=":", lw=1)
    ax.text(65504 * 1.3, 1e-8, "65504", fontsize=8, color="0.3")
    ax.set_xscale("log"); ax.set_yscale("log"); ax.set_ylim(1e-9, 2)
    ax.set_xlabel("x"); ax.set_ylabel("|round(x) − x| / x")
    ax.set_title("Rounding a float32 to fp16 and to bf16 (nearest, ties to even)", fontsize=9)
    ax.legend(fontsize=8, markerscale=6); despine(ax); fig.tight_layout()
    save(fig, "half_precision.png")


def main() -> None:
    records = measured()
    fig_roofline(records)
    fig_bank_map()
    prof = profiled()
    if prof:
        fig_bank_profile(prof)
    x, err = rounding_errors()
    fig_half_precision(x, err)

    print(f"ridge points: fp16 tensor {FP16_TENSOR_TFLOPS / HBM_TBS:.0f} FLOP/B, fp32 {FP32_TFLOPS / HBM_TBS:.0f} FLOP/B")
    for r in records:
        print(f"{r['kernel']:22s} {r['dtype']} d={r['d']:3d}: {attention_intensity(r):6.0f} FLOP/B, {r['tflops']:7.3g} TFLOP/s "
              f"({r['tflops'] / (FP16_TENSOR_TFLOPS if on_tensor_cores(r) else FP32_TFLOPS):.1%} of the peak of its units); "
              f"{r['baseline']} {r['baseline_tflops']:.3g}")
    for label, p in prof.items():
        print(f"{label:24s}: {p['requests']} shared load requests, {p['wavefronts']} wavefronts "
              f"({p['wavefronts'] / p['ideal']:.2f}x the ideal), score line {p['score_line']:.1f} per request")
    for name, (v, e) in err.items():
        normal = (x > 1e-4) & (x < 6e4)
        print(f"{name}: worst relative error in [1e-4, 6e4] {np.nanmax(e[normal]):.2e}; "
              f"largest finite {v[np.isfinite(v)].max():.4g}")


if __name__ == "__main__":
    main()

"""Figures for module 01 (naive attention). Run: python modules/01_naive_attention/make_figures.py

All sizes, byte counts and softmax values are computed here; the README quotes the same
numbers. Output: PNGs in img/.
"""
from __future__ import annotations

import sys
from pathlib import Path

# figstyle (the shared style, in modules/) selects the Agg backend: import it before pyplot.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from figstyle import BLUE, GREEN, ORANGE, PURPLE, RED, despine, saver  # noqa: E402

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle  # noqa: E402

from grader.device import H100_SXM  # noqa: E402

IMG = Path(__file__).resolve().parent / "img"
save = saver(IMG)

FLOAT = 4  # bytes
GiB = 2**30
MiB = 2**20


# --------------------------------------------------------------------------- traffic model


def traffic_bytes(N: int, d: int, BH: int, softmax_passes: int = 1) -> dict[str, float]:
    """Global-memory bytes of the three naive kernels, assuming every element crosses the
    DRAM boundary once per pass (a perfect cache inside a kernel, nothing kept between
    kernels). ``softmax_passes`` = how many times softmax_rows reads each S row from DRAM."""
    nd, nn = N * d * BH * FLOAT, N * N * BH * FLOAT
    return {
        "attn_scores: read Q, K": 2 * nd,
        "attn_scores: write S": nn,
        "softmax_rows: read S": softmax_passes * nn,
        "softmax_rows: write P": nn,
        "attn_pv: read P": nn,
        "attn_pv: read V": nd,
        "attn_pv: write O": nd,
    }


def flops(N: int, d: int, BH: int) -> int:
    """Multiply-adds of QK^T and PV counted as 2 FLOPs each (softmax's O(N^2) ignored)."""
    return 4 * N * N * d * BH


# --------------------------------------------------------------------------- pipeline


def fig_pipeline() -> None:
    N, d = 12, 3  # drawing proportions only: an N x N matrix next to N x d ones
    u = 0.22  # drawing units per element
    fig, ax = plt.subplots(figsize=(8.6, 4.3))
    top = N * u  # top edge of every tensor

    def tensor(x, cols, label, color, sub):
        ax.add_patch(Rectangle((x, 0), cols * u, N * u, fc=color, ec="black", lw=1, alpha=0.85))
        ax.text(x + cols * u / 2, N * u / 2, label, ha="center", va="center", fontsize=12, weight="bold", color="white")
        ax.text(x + cols * u / 2, -0.1, sub, ha="center", va="top", fontsize=8.5, color="#333")
        return x + cols * u / 2

    def kernel(cx, name, what):
        ax.add_patch(FancyBboxPatch((cx - 0.95, top + 0.9), 1.9, 0.8, boxstyle="round,pad=0.06", fc="#F6F6F6", ec="#555"))
        ax.text(cx, top + 1.45, name, ha="center", fontsize=9.5, family="monospace", weight="bold")
        ax.text(cx, top + 1.08, what, ha="center", fontsize=8.5, color="#333")

    def arrow(x0, x1, up, color="#555"):
        p, q = ((x0, top + 0.05), (x1, top + 0.82)) if up else ((x0, top + 0.82), (x1, top + 0.05))
        ax.add_patch(FancyArrowPatch(p, q, arrowstyle="-|>", mutation_scale=12, color=color, lw=1.4))

    q = tensor(0.0, d, "Q", BLUE, "N×d")
    k = tensor(0.9, d, "K", BLUE, "N×d")
    sx = tensor(2.4, N, "S", ORANGE, "N×N")
    px = tensor(6.0, N, "P", ORANGE, "N×N")
    v = tensor(9.6, d, "V", BLUE, "N×d")
    o = tensor(11.0, d, "O", GREEN, "N×d")
    kernel(1.35, "attn_scores", "S = scale·Q·Kᵀ")
    kernel(4.8, "softmax_rows", "P = softmax(S)")
    kernel(8.7, "attn_pv", "O = P·V")
    arrow(q, 1.1, True)
    arrow(k, 1.4, True)
    arrow(1.9, sx - 0.3, False, RED)
    arrow(sx + 0.3, 4.6, True, RED)
    arrow(5.0, px - 0.3, False, RED)
    arrow(px + 0.3, 8.4, True, RED)
    arrow(v, 8.9, True)
    arrow(9.3, o, False)
    ax.text(0, -0.75, "Every arrow is a trip through global memory (HBM). Q, K, V, O are N×d; the intermediates S and P\n"
            "are N×N, and each is written by one kernel and read back by the next (red arrows).",
            fontsize=9, color="#333", va="top")
    ax.set_xlim(-0.2, 12.0)
    ax.set_ylim(-1.6, top + 1.9)
    ax.set_aspect("equal")
    ax.axis("off")
    fig.tight_layout()
    save(fig, "pipeline.png")


# --------------------------------------------------------------------------- footprint


def fig_footprint() -> None:
    Ns = 2 ** np.arange(9, 18)  # 512 .. 131072
    BH, H100 = 32, H100_SXM.hbm_gb * 1e9
    fig, ax = plt.subplots(figsize=(8.4, 4.6))
    s_bytes = Ns.astype(float) ** 2 * BH * FLOAT
    ax.plot(Ns, s_bytes, "-o", color=ORANGE, label=f"S for B·H = {BH} heads (P is the same size again)")
    ax.plot(Ns, s_bytes / BH, "--o", color=ORANGE, alpha=0.6, ms=4, label="S for one head")
    for dd, ls in ((128, "-s"), (64, "-^")):
        ax.plot(Ns, 4 * Ns.astype(float) * dd * BH * FLOAT, ls, color=BLUE, ms=4,
                alpha=1.0 if dd == 64 else 0.6, label=f"Q, K, V, O together, d = {dd}, {BH} heads")
    ax.axhline(H100, color=RED, lw=1)
    ax.text(Ns[0], H100 * 1.25, f"{H100_SXM.hbm_gb} GB: all of an H100's HBM", color=RED, fontsize=9)
    ax.axhline(H100_SXM.l2_mb * 1e6, color=PURPLE, lw=1)
    ax.text(Ns[-1], H100_SXM.l2_mb * 1e6 * 1.3, f"{H100_SXM.l2_mb} MB: H100 L2 cache", color=PURPLE, fontsize=9, ha="right")
    n0 = 4096
    v0 = n0 * n0 * BH * FLOAT
    ax.annotate(f"N = {n0}: {v0 / GiB:.0f} GiB for S", xy=(n0, v0), xytext=(n0 / 7, v0 * 6),
                fontsize=9, arrowprops=dict(arrowstyle="->"))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(Ns, [f"{n // 1024}K" if n >= 1024 else str(n) for n in Ns])
    ax.set_xlabel("sequence length N")
    ax.set_ylabel("bytes (fp32)")
    ax.set_title("Memory held by the naive kernels: S grows as N², the inputs as N·d", fontsize=10.5)
    ax.grid(alpha=0.3, which="major")
    ax.legend(fontsize=8.5, loc="lower right")
    fig.tight_layout()
    save(fig, "memory_footprint.png")


# --------------------------------------------------------------------------- traffic


def fig_traffic() -> None:
    N, d, BH = 4096, 64, 32
    t1 = traffic_bytes(N, d, BH, softmax_passes=1)
    t3 = traffic_bytes(N, d, BH, softmax_passes=3)
    names = list(t1)
    fig, ax = plt.subplots(figsize=(9.0, 4.2))
    y = np.arange(len(names))[::-1]
    vals = np.array([t1[k] for k in names]) / GiB
    extra = np.array([t3[k] - t1[k] for k in names]) / GiB
    colors = [ORANGE if ("S" in k.split(":")[1] or "P" in k.split(":")[1]) else BLUE for k in names]
    ax.barh(y, vals, color=colors)
    ax.barh(y, extra, left=vals, color="none", ec=ORANGE, hatch="///", lw=0.8)
    for yy, v, e in zip(y, vals, extra):
        txt = f"{v * 1024:.0f} MiB" if v < 0.5 else f"{v:.0f} GiB"
        if e:
            txt += f"  (+{e:.0f} GiB if all 3 passes reach HBM)"
        ax.text(v + e + 0.05, yy, txt, va="center", fontsize=8.5)
    ax.set_yticks(y, names, fontsize=9, family="monospace")
    ax.set_xlabel("GiB moved between HBM and the SMs")
    tot1, tot3 = sum(t1.values()), sum(t3.values())
    io = (2 * N * d + 2 * N * d) * BH * FLOAT
    ax.set_title(f"Global traffic, N = {N}, d = {d}, B·H = {BH}, fp32: {tot1 / GiB:.2f} GiB "
                 f"({tot3 / GiB:.2f} with a 3-pass softmax);\nQ, K, V and O alone are {io / MiB:.0f} MiB", fontsize=10)
    ax.set_xlim(0, 9.0)
    despine(ax)
    fig.tight_layout()
    save(fig, "traffic.png")


# --------------------------------------------------------------------------- overflow


def fig_overflow() -> None:
    f32 = np.float32
    big = np.log(np.float64(np.finfo(f32).max))
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10.4, 4.0))
    x = np.linspace(80, 92, 481).astype(f32)
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(x)
    fin = np.isfinite(e)
    a1.plot(x[fin], e[fin], color=BLUE)
    a1.plot(x[~fin], np.full((~fin).sum(), 1e39), color=RED, lw=3)
    a1.axvline(big, color=RED, ls="--", lw=1)
    a1.axhline(np.finfo(f32).max, color="#888", lw=0.8)
    a1.text(80.2, float(np.finfo(f32).max) * 1.6, "FLT_MAX ≈ 3.40·10³⁸", fontsize=8.5, color="#555")
    a1.text(big + 0.15, 1e36, f"x > ln(FLT_MAX)\n≈ {big:.2f}:\nexpf(x) = inf", color=RED, fontsize=9)
    a1.set_yscale("log")
    a1.set_ylim(1e34, 1e40)
    a1.set_xlabel("x")
    a1.set_title("float32 exp(x) near its limit", fontsize=10)

    # softmax of the row [x, x+1, x+2] as the whole row drifts upward
    base = np.linspace(0, 100, 1001).astype(f32)
    rows = np.stack([base, base + f32(1), base + f32(2)], 1)
    with np.errstate(over="ignore", invalid="ignore"):
        ex = np.exp(rows)
        unsafe = ex / ex.sum(1, keepdims=True)
        es = np.exp(rows - rows.max(1, keepdims=True))
        safe = es / es.sum(1, keepdims=True)
    a2.plot(base, safe[:, 2], color=GREEN, lw=3, label="safe: exp(x − max) / Σ")
    ok = np.isfinite(unsafe[:, 2])
    a2.plot(base[ok], unsafe[ok, 2], color=BLUE, ls="--", lw=1.5, label="unsafe: exp(x) / Σ exp")
    first_nan = base[~ok][0]
    a2.axvspan(first_nan, 100, color=RED, alpha=0.12)
    a2.text(first_nan + 1, 0.45, f"unsafe result is NaN\nfor x ≥ {first_nan:.1f}\n(x + 2 > {big:.2f})", color=RED, fontsize=9)
    a2.set_ylim(0, 1)
    a2.set_xlabel("x  (row = [x, x+1, x+2])")
    a2.set_ylabel("softmax of the last entry")
    a2.set_title("The same row shifted upward: only the safe form survives", fontsize=10)
    a2.legend(fontsize=8.5, loc="lower left")
    fig.tight_layout()
    save(fig, "softmax_overflow.png")


# --------------------------------------------------------------------------- batched layout


def fig_batched_layout() -> None:
    BH, N, d = 4, 8, 2
    fig, ax = plt.subplots(figsize=(10.4, 3.0))
    u = 0.055
    colors = [BLUE, ORANGE, GREEN, PURPLE]

    def strip(y, per_head, name, stride_txt):
        for z in range(BH):
            ax.add_patch(Rectangle((z * per_head * u, y), per_head * u, 0.5, fc=colors[z], alpha=0.75, ec="white"))
            ax.text((z + 0.5) * per_head * u, y + 0.25, f"z = {z}" if per_head * u > 1.5 else str(z), ha="center", va="center", fontsize=8.5, color="white", weight="bold")
        ax.text(-0.15, y + 0.25, name, ha="right", va="center", fontsize=10, family="monospace")
        ax.text(BH * per_head * u + 0.15, y + 0.25, stride_txt, ha="left", va="center", fontsize=9)

    strip(1.6, N * d, "Q, K, V, O", f"head z starts at z·N·d  ({N * d} floats apart)")
    strip(0.6, N * N, "S, P", f"head z starts at z·N·N  ({N * N} floats apart)")
    ax.text(0, 0.15, f"Drawn to scale for B·H = {BH}, N = {N}, d = {d}. "
            "Tensor [B, H, N, d] in row-major order: head (b, h) is slice z = b·H + h, so one z-slice of the grid per head.",
            fontsize=8.5, color="#333")
    ax.set_xlim(-1.6, BH * N * N * u + 4.6)
    ax.set_ylim(0, 2.3)
    ax.axis("off")
    fig.tight_layout()
    save(fig, "batched_layout.png")


FIGURES = [fig_pipeline, fig_footprint, fig_traffic, fig_overflow, fig_batched_layout]


def main() -> None:
    for f in FIGURES:
        f()
    print(f"module 01: wrote {len(FIGURES)} figures to {IMG}")


if __name__ == "__main__":
    main()

"""Figures for module 08 (tensor cores). Run: python modules/08_tensor_cores/make_figures.py

The fragment pictures are drawn from grader/fragments.py, the layout definitions the emulator
runs; the throughput chart from the committed H100 measurements in benchmarks/results/
(08_tensor_cores.json for this module's kernels, gpu_evidence.json for module 04's). Output: PNGs in img/.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# figstyle (the shared style, in modules/) selects the Agg backend: import it before pyplot.
sys.path.insert(0, str(ROOT / "modules"))
sys.path.insert(0, str(ROOT))
from figstyle import BLUE, GREY, ORANGE, despine, saver  # noqa: E402

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from grader import fragments  # noqa: E402

IMG = Path(__file__).resolve().parent / "img"
RESULTS = ROOT / "benchmarks" / "results"
save = saver(IMG)


def lane_grid(shape, cells):
    """(lane, register, half) of every element: ``cells`` yields (row, col, lane, reg, half)."""
    lane = np.full(shape, -1)
    label = np.empty(shape, dtype=object)
    for row, col, ln, reg, half in cells:
        lane[row, col] = ln
        label[row, col] = f"{ln}\n{reg}.{half}"
    assert (lane >= 0).all(), "every element is held by exactly one lane"
    return lane, label


def draw(ax, lane, label, title, xlabel, ylabel):
    cmap = plt.get_cmap("tab20b", 8)
    ax.imshow(lane // 4 % 8, cmap=cmap, vmin=-0.5, vmax=7.5)  # colour: the quad (g = lane / 4)
    for (r, c), text in np.ndenumerate(label):
        ax.text(c, r, text, ha="center", va="center", fontsize=4.6, color="white", linespacing=0.9)
    ax.set_xticks(range(lane.shape[1]))
    ax.set_yticks(range(lane.shape[0]))
    ax.tick_params(labelsize=6, length=0)
    for k in range(8, max(lane.shape), 8):
        if k < lane.shape[1]:
            ax.axvline(k - 0.5, color="k", lw=1)
        if k < lane.shape[0]:
            ax.axhline(k - 0.5, color="k", lw=1)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_ylabel(ylabel, fontsize=8)


def fig_fragments():
    a = lane_grid((16, 16), ((*fragments.a_element(16, ln, r, h), ln, r, h)
                             for ln in range(32) for r in range(4) for h in range(2)))
    b = lane_grid((16, 8), ((*fragments.b_element(16, ln, r, h), ln, r, h)
                            for ln in range(32) for r in range(2) for h in range(2)))
    c = lane_grid((16, 8), ((*fragments.c_element(ln, i), ln, i, 0) for ln in range(32) for i in range(4)))
    c_label = np.vectorize(lambda s: s.replace(".0", "").replace("\n", "\nc"))(c[1])
    fig, axes = plt.subplots(1, 3, figsize=(9.6, 4.2), gridspec_kw=dict(width_ratios=[16, 8, 8]))
    draw(axes[0], *a, "A (16 × 16, half): lane, register.half", "column k", "row m")
    draw(axes[1], *b, "B (16 × 8, half): lane, register.half", "column n", "row k")
    draw(axes[2], c[0], c_label, "C and D (16 × 8, float): lane, float", "column n", "row m")
    fig.suptitle("mma.m16n8k16: which lane holds each element (colour: the quad g = lane / 4)", fontsize=10)
    fig.tight_layout()
    save(fig, "fragments.png")


def fig_ldmatrix():
    fig, axes = plt.subplots(1, 2, figsize=(7.2, 3.6))
    for ax, trans in zip(axes, (False, True)):
        lane, label = lane_grid((8, 8), ((*fragments.ldmatrix_element(ln, h, trans), ln, 0, h)
                                         for ln in range(32) for h in range(2)))
        label = np.vectorize(lambda s: s.split("\n")[0])(label)
        draw(ax, lane, label, f"ldmatrix{' .trans' if trans else ''}: lane receiving each element",
             "column as stored", "row as stored (address from lane = row)")
    fig.tight_layout()
    save(fig, "ldmatrix.png")


def records():
    ours = json.loads((RESULTS / "08_tensor_cores.json").read_text())["bench"]
    course = json.loads((RESULTS / "gpu_evidence.json").read_text())["bench"]
    return ours, course


def fig_throughput():
    ours, course = records()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8), gridspec_kw=dict(width_ratios=[3, 2]))
    labels, mine, base = [], [], []
    for d in (64, 128):
        fa2 = next(r for r in course if r["kernel"] == "flash_fwd_fa2" and r["d"] == d and r["dtype"] == "fp32")
        labels.append(f"04 flash_fwd_fa2\nfp32, d={d}")
        mine.append(fa2["tflops"])
        base.append(fa2["sol_tflops"])
        for dtype in ("fp16", "bf16"):
            r = next(r for r in ours if r["kernel"] == f"tc_flash_fwd_d{d}" and r["dtype"] == dtype)
            labels.append(f"08 tc_flash_fwd\n{dtype}, d={d}")
            mine.append(r["tflops"])
            base.append(r["baseline_tflops"])
    x = np.arange(len(labels))
    ax1.bar(x - 0.2, mine, 0.4, color=BLUE, label="course kernel")
    ax1.bar(x + 0.2, base, 0.4, color=GREY, label="PyTorch SDPA flash (fp16 for the fp32 kernel)")
    for xi, m, b in zip(x, mine, base):
        ax1.text(xi - 0.2, m, f"{m:.3g}", ha="center", va="bottom", fontsize=7)
        ax1.text(xi + 0.2, b, f"{b:.3g}", ha="center", va="bottom", fontsize=7)
    ax1.set_xticks(x, labels, fontsize=7)
    ax1.set_ylabel("TFLOP/s")
    ax1.set_title("attention forward, B=4 H=16 S=4096 (H100)", fontsize=9)
    ax1.legend(fontsize=7, frameon=False)
    mm = [r for r in ours if r["kernel"] in ("wmma_matmul", "mma_matmul")]
    x = np.arange(len(mm))
    ax2.bar(x - 0.2, [r["tflops"] for r in mm], 0.4, color=ORANGE, label="course kernel")
    ax2.bar(x + 0.2, [r["baseline_tflops"] for r in mm], 0.4, color=GREY, label="cuBLAS (cupy.matmul)")
    for xi, r in zip(x, mm):
        ax2.text(xi - 0.2, r["tflops"], f"{r['tflops']:.3g}", ha="center", va="bottom", fontsize=7)
        ax2.text(xi + 0.2, r["baseline_tflops"], f"{r['baseline_tflops']:.3g}", ha="center", va="bottom", fontsize=7)
    ax2.set_xticks(x, [r["kernel"] for r in mm], fontsize=7)
    ax2.set_title("fp16 matmul 4096³, float out (H100)", fontsize=9)
    ax2.legend(fontsize=7, frameon=False)
    despine(ax1, ax2)
    fig.tight_layout()
    save(fig, "throughput.png")


if __name__ == "__main__":
    fig_fragments()
    fig_ldmatrix()
    fig_throughput()

"""Figures for module 00 (launching kernels). Run: python modules/00_launching_kernels/make_figures.py

Every number drawn here is computed below from the launch parameters, so changing
N_ELEMS, ROWS or COLS redraws the pictures consistently. Output: PNGs in img/.
"""
from __future__ import annotations

import sys
from pathlib import Path

# figstyle (the shared style, in modules/) selects the Agg backend: import it before pyplot.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from figstyle import BLUE, GREEN, GREY, ORANGE, PURPLE, RED, ceil_div, despine, saver  # noqa: E402

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import ListedColormap  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from grader.device import H100_SXM  # noqa: E402

IMG = Path(__file__).resolve().parent / "img"
save = saver(IMG)

IN_RANGE, OUT_RANGE, HIGHLIGHT, GOOD, BAD = BLUE, GREY, ORANGE, GREEN, RED


# --------------------------------------------------------------------------- 1-D grid

N_ELEMS = 1000
THREADS = 256
WARP = 32


def fig_vector_add_grid() -> None:
    blocks = ceil_div(N_ELEMS, THREADS)
    warps = THREADS // WARP
    fig, ax = plt.subplots(figsize=(9.6, 3.3))
    bar_h = 0.8
    for b in range(blocks):
        x0 = b * THREADS
        for w in range(warps):
            wx = x0 + w * WARP
            valid = max(0, min(WARP, N_ELEMS - wx))
            if valid:
                ax.add_patch(Rectangle((wx, 0), valid, bar_h, fc=IN_RANGE, ec="none"))
            if valid < WARP:
                ax.add_patch(Rectangle((wx + valid, 0), WARP - valid, bar_h, fc=OUT_RANGE, ec="none", hatch="///"))
            ax.add_patch(Rectangle((wx, 0), WARP, bar_h, fc="none", ec="white", lw=0.8))
        ax.add_patch(Rectangle((x0, 0), THREADS, bar_h, fc="none", ec="black", lw=1.6))
        ax.text(x0 + THREADS / 2, bar_h + 0.12, f"blockIdx.x = {b}", ha="center", va="bottom", fontsize=10)
        ax.text(x0 + THREADS / 2, -0.12, f"i = {x0} … {x0 + THREADS - 1}", ha="center", va="top", fontsize=9, color="#444")
    # One sample thread.
    sb, st = 2, 37
    si = sb * THREADS + st
    ax.add_patch(Rectangle((si - 0.5, 0), 3, bar_h, fc=HIGHLIGHT, ec=HIGHLIGHT))
    ax.annotate(
        f"blockIdx.x = {sb}, threadIdx.x = {st}\ni = {sb}·{THREADS} + {st} = {si}",
        xy=(si + 1, bar_h), xytext=(si - 330, 1.75), fontsize=9,
        arrowprops=dict(arrowstyle="->", color=HIGHLIGHT), color="#333",
    )
    idle = blocks * THREADS - N_ELEMS
    ax.annotate(
        f"{idle} threads with i ≥ n = {N_ELEMS}:\nthe guard `if (i < n)` skips them",
        xy=(N_ELEMS + idle / 2, bar_h / 2), xytext=(N_ELEMS - 250, 1.75), fontsize=9,
        arrowprops=dict(arrowstyle="->", color="#666"), color="#333",
    )
    ax.text(0, -0.62, f"n = {N_ELEMS}, blockDim.x = {THREADS}, gridDim.x = ceil_div({N_ELEMS}, {THREADS}) = {blocks}; "
            f"white lines split each block into its {warps} warps of {WARP} threads",
            fontsize=9, va="top", color="#333")
    ax.set_xlim(-10, blocks * THREADS + 10)
    ax.set_ylim(-0.95, 2.35)
    ax.axis("off")
    ax.set_title("vector_add: one thread per element, i = blockIdx.x·blockDim.x + threadIdx.x", fontsize=11)
    fig.tight_layout()
    save(fig, "vector_add_grid.png")


# --------------------------------------------------------------------------- 2-D grid

ROWS, COLS, TB = 40, 70, 16


def fig_row_scale_grid() -> None:
    gx, gy = ceil_div(COLS, TB), ceil_div(ROWS, TB)
    W, H = gx * TB, gy * TB
    inside = np.zeros((H, W))
    inside[:ROWS, :COLS] = 1
    fig, ax = plt.subplots(figsize=(9.4, 4.6))
    cmap = ListedColormap([OUT_RANGE, "#AFC3E3"])
    ax.pcolormesh(np.arange(W + 1), np.arange(H + 1), inside, cmap=cmap, vmin=0, vmax=1)
    for c in range(W + 1):
        ax.plot([c, c], [0, H], color="white", lw=0.3)
    for r in range(H + 1):
        ax.plot([0, W], [r, r], color="white", lw=0.3)
    for bx in range(gx):
        for by in range(gy):
            ax.add_patch(Rectangle((bx * TB, by * TB), TB, TB, fc="none", ec="black", lw=1.5))
            ax.text(bx * TB + 1, by * TB + 2.3, f"({bx},{by})", fontsize=8.5, color="#222")
    ax.add_patch(Rectangle((0, 0), COLS, ROWS, fc="none", ec=IN_RANGE, lw=2.2))
    # One sample thread.
    bx, by, tx, ty = 2, 1, 5, 9
    c, r = bx * TB + tx, by * TB + ty
    ax.add_patch(Rectangle((c, r), 1, 1, fc=HIGHLIGHT, ec="black", lw=0.8))
    ax.annotate(
        f"blockIdx = ({bx},{by}), threadIdx = ({tx},{ty})\n"
        f"c = {bx}·{TB} + {tx} = {c}   (x → column)\n"
        f"r = {by}·{TB} + {ty} = {r}   (y → row)",
        xy=(c + 1, r + 0.5), xytext=(W + 2, 8), fontsize=9,
        arrowprops=dict(arrowstyle="->", color=HIGHLIGHT),
    )
    ax.text(W + 2, 26, f"rows = {ROWS}, cols = {COLS}\nblock = ({TB},{TB})\n"
            f"grid = (ceil_div({COLS},{TB}), ceil_div({ROWS},{TB}))\n     = ({gx},{gy})\n"
            "grey: outside the matrix,\nskipped by the guard", fontsize=9, va="top")
    ax.set_xlim(0, W + 33)
    ax.set_ylim(H, 0)
    ax.spines["bottom"].set_bounds(0, W)
    ax.set_aspect("equal")
    ax.set_xticks(np.arange(0, W + 1, TB))
    ax.set_yticks(np.arange(0, H + 1, TB))
    ax.set_xlabel("column c  (threadIdx.x, blockIdx.x)")
    ax.set_ylabel("row r  (threadIdx.y, blockIdx.y)")
    despine(ax)
    ax.set_title("row_scale: a 2-D grid of 16×16 blocks laid over a 40×70 matrix; labels are (blockIdx.x, blockIdx.y)", fontsize=10)
    fig.tight_layout()
    save(fig, "row_scale_grid.png")


# --------------------------------------------------------------------------- coalescing

SECTOR = 32  # bytes: the unit a GPU moves between DRAM/L2 and the SM


def warp_sectors(x_is_column: bool, cols: int) -> tuple[np.ndarray, int]:
    """Cells (r, c) touched by warp 0 of a 16x16 block at blockIdx (0,0), and 32-byte sectors."""
    t = np.arange(WARP)
    tx, ty = t % TB, t // TB  # threadIdx.x varies fastest inside a warp
    r, c = (ty, tx) if x_is_column else (tx, ty)
    addr = (r * cols + c) * 4
    return np.stack([r, c], 1), len(np.unique(addr // SECTOR))


def fig_coalescing() -> None:
    cols, show_r, show_c = 64, 16, 32
    fig, axes = plt.subplots(1, 2, figsize=(10.2, 4.4))
    for ax, x_is_col in zip(axes, (True, False)):
        cells, nsec = warp_sectors(x_is_col, cols)
        grid = np.zeros((show_r, show_c))
        for r, c in cells:
            grid[r, c] = 1
        touched_sectors = {(r, c // 8) for r, c in cells}
        for r in range(show_r):
            for s in range(show_c // 8):
                hot = (r, s) in touched_sectors
                ax.add_patch(Rectangle((s * 8, r), 8, 1, fc="#F3D9C9" if hot else "white", ec="none"))
        for r, c in cells:
            ax.add_patch(Rectangle((c, r), 1, 1, fc=HIGHLIGHT, ec="none"))
        for c in range(show_c + 1):
            ax.plot([c, c], [0, show_r], color="#BBBBBB", lw=1.6 if c % 8 == 0 else 0.3)
        for r in range(show_r + 1):
            ax.plot([0, show_c], [r, r], color="#BBBBBB", lw=0.3)
        useful = WARP * 4
        moved = nsec * SECTOR
        title = ("x ↔ column:  c = threadIdx.x,  r = threadIdx.y" if x_is_col
                 else "x ↔ row:  r = threadIdx.x,  c = threadIdx.y")
        ax.set_title(title, fontsize=10)
        ax.text(0, show_r + 1.2,
                f"one warp loads {WARP} floats = {useful} B\n"
                f"touches {nsec} sectors of {SECTOR} B = {moved} B moved ({100 * useful // moved}% useful)",
                fontsize=9.5, va="top", color=GOOD if nsec * SECTOR == useful else BAD)
        ax.set_xlim(0, show_c)
        ax.set_ylim(show_r + 4.2, 0)
        ax.set_aspect("equal")
        ax.set_xticks([0, 8, 16, 24, 32])
        ax.set_yticks([0, 4, 8, 12, 16])
        ax.set_xlabel("column (thick lines: 32-byte sector boundaries)", fontsize=9)
        ax.set_ylabel("row", fontsize=9)
    fig.suptitle(f"Warp 0 of a 16×16 block reading a row-major float matrix ({cols} columns): orange = elements read,\n"
                 "shaded = sectors the memory system has to move", fontsize=10.5)
    fig.tight_layout()
    save(fig, "coalescing.png")


# --------------------------------------------------------------------------- memory hierarchy

# The H100 SXM's (grader.device, which cites the whitepaper and datasheet for each).
SMS = H100_SXM.sms
REG_PER_SM = H100_SXM.registers_per_sm * 4  # bytes: 32-bit registers
SMEM_PER_SM = H100_SXM.shared_per_sm
L2 = H100_SXM.l2_mb * 1e6
HBM = H100_SXM.hbm_gb * 1e9
HBM_BW = H100_SXM.hbm_gbps * 1e9
CLOCK = H100_SXM.max_clock_mhz * 1e6
SMEM_BW = SMS * H100_SXM.shared_bytes_per_clock_per_sm * CLOCK


def human(nbytes: float) -> str:
    for unit, f in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if nbytes >= f:
            return f"{nbytes / f:.3g} {unit}"
    return f"{nbytes:.0f} B"


def fig_memory_hierarchy() -> None:
    levels = [
        ("registers\n(per thread, private)", SMS * REG_PER_SM, f"{REG_PER_SM // 1024} KiB per SM"),
        ("shared memory\n(per block)", SMS * SMEM_PER_SM, f"≤ {SMEM_PER_SM // 1024} KiB per SM"),
        ("L2 cache\n(whole GPU)", L2, "shared by all SMs"),
        ("global memory, HBM\n(whole GPU)", HBM, "what cudaMalloc / xp arrays use"),
    ]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10.4, 3.9), gridspec_kw=dict(width_ratios=[1.6, 1]))
    y = np.arange(len(levels))[::-1]
    colors = [GOOD, GOOD, PURPLE, IN_RANGE]
    a1.barh(y, [lv[1] for lv in levels], color=colors)
    a1.set_xscale("log")
    a1.set_yticks(y, [lv[0] for lv in levels], fontsize=9)
    for yy, (_, cap, note) in zip(y, levels):
        a1.text(cap * 1.3, yy, f"{human(cap)}  ({note})", va="center", fontsize=8.5)
    a1.set_xlim(1e6, 3e14)
    a1.set_xlabel("capacity, whole GPU (bytes, log scale)")
    a1.set_title(f"Capacity on an H100 SXM ({SMS} SMs)", fontsize=10)
    bw = [("shared memory\n(all SMs)", SMEM_BW, GOOD), ("HBM", HBM_BW, IN_RANGE)]
    a2.bar([b[0] for b in bw], [b[1] / 1e12 for b in bw], color=[b[2] for b in bw])
    for i, (_, v, _) in enumerate(bw):
        a2.text(i, v / 1e12 + 0.6, f"≈ {v / 1e12:.3g} TB/s", ha="center", fontsize=9)
    a2.set_ylabel("bandwidth (TB/s)")
    a2.set_ylim(0, SMEM_BW / 1e12 * 1.18)
    a2.set_title(f"Bandwidth: on-chip ≈ {SMEM_BW / HBM_BW:.0f}× HBM", fontsize=10)
    for a in (a1, a2):
        despine(a)
    fig.text(0.01, 0.01, f"Shared-memory bandwidth = {SMS} SMs × {H100_SXM.shared_bytes_per_clock_per_sm} B/clock × "
             f"{CLOCK / 1e9:g} GHz. "
             "Small and fast on chip, large and slower off chip: every later module is about moving less data across that line.",
             fontsize=8, color="#444")
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    save(fig, "memory_hierarchy.png")


FIGURES = [fig_vector_add_grid, fig_row_scale_grid, fig_coalescing, fig_memory_hierarchy]


def main() -> None:
    for f in FIGURES:
        f()
    print(f"module 00: wrote {len(FIGURES)} figures to {IMG}")


if __name__ == "__main__":
    main()

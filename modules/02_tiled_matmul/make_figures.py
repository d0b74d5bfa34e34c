"""Figures for module 02 (tiled matmul). Run: python modules/02_tiled_matmul/make_figures.py

The load counts are computed two ways: by the closed forms quoted in the README and by
walking the loops of the naive and tiled kernels (bounds checks included) for small sizes;
the script stops if they disagree. Output: PNGs in img/.
"""
from __future__ import annotations

import sys
from itertools import product
from pathlib import Path

# figstyle (the shared style, in modules/) selects the Agg backend: import it before pyplot.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from figstyle import BLUE, GREEN, GREY, LIGHT, ORANGE, RED, ceil_div, despine, saver  # noqa: E402

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import ListedColormap  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

IMG = Path(__file__).resolve().parent / "img"
save = saver(IMG)


# --------------------------------------------------------------------------- load counts


def loads_naive(M: int, N: int, K: int) -> int:
    """One thread per C element, each reads a row of A and a column of B: 2·M·N·K."""
    return 2 * M * N * K


def loads_tiled(M: int, N: int, K: int, T: int) -> int:
    """Each block loads every A element of its row strip once and every B element of its
    column strip once; out-of-range tile elements are zero-filled, not loaded."""
    return M * K * ceil_div(N, T) + K * N * ceil_div(M, T)


def loads_tiled_walk(M: int, N: int, K: int, T: int) -> int:
    """Walk the tiled kernel's loops (grid, phases, threads) and count guarded loads."""
    count = 0
    for by, bx in product(range(ceil_div(M, T)), range(ceil_div(N, T))):
        for t in range(ceil_div(K, T)):
            for ty, tx in product(range(T), range(T)):
                row, col = by * T + ty, bx * T + tx
                count += (row < M) and (t * T + tx < K)  # As[ty][tx] = A[row][t*T + tx]
                count += (t * T + ty < K) and (col < N)  # Bs[ty][tx] = B[t*T + ty][col]
    return count


def check_counts() -> None:
    rng = np.random.default_rng(0)
    for _ in range(12):
        M, N, K = (int(v) for v in rng.integers(1, 40, 3))
        T = int(rng.choice([2, 4, 8]))
        assert loads_tiled_walk(M, N, K, T) == loads_tiled(M, N, K, T), (M, N, K, T)


# --------------------------------------------------------------------------- tiles sliding

def fig_tiled_phases() -> None:
    n, T, bx, by = 64, 16, 2, 1
    phases = n // T
    cmap = plt.get_cmap("YlOrBr")
    shades = [cmap(0.25 + 0.6 * t / (phases - 1)) for t in range(phases)]
    fig, ax = plt.subplots(figsize=(7.2, 6.6))
    gap = 8
    # Layout: A at bottom-left, B at top-right, C at bottom-right; y grows downward.
    A0, B0, C0 = (0, n + gap), (n + gap, 0), (n + gap, n + gap)

    def mat(origin, label, shape_txt):
        x0, y0 = origin
        ax.add_patch(Rectangle((x0, y0), n, n, fc="#F4F4F4", ec="black", lw=1.2))
        for i in range(1, phases):
            ax.plot([x0 + i * T, x0 + i * T], [y0, y0 + n], color="#CCCCCC", lw=0.6)
            ax.plot([x0, x0 + n], [y0 + i * T, y0 + i * T], color="#CCCCCC", lw=0.6)
        ax.text(x0 - 2, y0 + n / 2, label, ha="right", va="center", fontsize=14, weight="bold")
        ax.text(x0 + n / 2, y0 + n + 2, shape_txt, ha="center", va="top", fontsize=9)

    mat(A0, "A", "M × K")
    mat(B0, "B", "K × N")
    mat(C0, "C", "M × N")
    for t in range(phases):
        ax.add_patch(Rectangle((A0[0] + t * T, A0[1] + by * T), T, T, fc=shades[t], ec="black", lw=0.8))
        ax.text(A0[0] + t * T + T / 2, A0[1] + by * T + T / 2, f"t={t}", ha="center", va="center", fontsize=9)
        ax.add_patch(Rectangle((B0[0] + bx * T, B0[1] + t * T), T, T, fc=shades[t], ec="black", lw=0.8))
        ax.text(B0[0] + bx * T + T / 2, B0[1] + t * T + T / 2, f"t={t}", ha="center", va="center", fontsize=9)
    ax.add_patch(Rectangle((C0[0] + bx * T, C0[1] + by * T), T, T, fc=BLUE, ec="black", lw=1.2))
    ax.text(C0[0] + bx * T + T / 2, C0[1] + by * T + T / 2, f"block\n({bx},{by})", ha="center", va="center",
            fontsize=8.5, color="white")
    ax.plot([A0[0] + n, C0[0] + bx * T], [A0[1] + by * T + T / 2] * 2, ls=":", color="#555")
    ax.plot([B0[0] + bx * T + T / 2] * 2, [B0[1] + n, C0[1] + by * T], ls=":", color="#555")
    ax.text(0, n / 2 - 6,
            f"M = N = K = {n}, TILE = {T}\n\n"
            f"Block ({bx},{by}) owns one {T}×{T} tile of C.\n"
            f"It walks K in {phases} phases. In phase t\n"
            f"every thread loads one element of\n"
            f"A-tile ({by},t) and one of B-tile (t,{bx})\n"
            f"into shared memory, the block syncs,\n"
            f"then each thread does {T} multiply-adds\n"
            "from shared memory and syncs again.",
            fontsize=9.5, va="center")
    ax.set_xlim(-10, 2 * n + gap + 2)
    ax.set_ylim(2 * n + gap + 5, -2)
    ax.set_aspect("equal")
    ax.axis("off")
    fig.tight_layout()
    save(fig, "tiled_phases.png")


# --------------------------------------------------------------------------- loads


def fig_loads() -> None:
    ns = np.arange(16, 1025)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10.6, 4.2))
    a1.plot(ns, [loads_naive(n, n, n) for n in ns], color=RED, label="naive: 2·n³")
    for T, c in ((8, "#9BB5DC"), (16, BLUE), (32, "#22427A")):
        a1.plot(ns, [loads_tiled(n, n, n, T) for n in ns], color=c, label=f"tiled, TILE = {T}")
    a1.set_xscale("log", base=2)
    a1.set_yscale("log")
    a1.set_xlabel("n  (M = N = K = n)")
    a1.set_ylabel("global loads issued (floats)")
    a1.set_title("Loads from global memory, C = A·B", fontsize=10)
    a1.legend(fontsize=8.5)
    a1.grid(alpha=0.3)

    ns2 = np.arange(96, 209)
    T = 16
    ratio = [loads_naive(n, n, n) / loads_tiled(n, n, n, T) for n in ns2]
    a2.plot(ns2, ratio, color=BLUE)
    for n in (127, 128, 129):
        r = loads_naive(n, n, n) / loads_tiled(n, n, n, T)
        a2.plot([n], [r], "o", color=ORANGE)
        pos = {127: (98, 13.0), 128: (131, 16.25), 129: (131, 14.0)}[n]
        a2.annotate(f"n = {n}: {r:.2f}×", xy=(n, r), xytext=pos, fontsize=8.5, va="center",
                    arrowprops=dict(arrowstyle="-", color="#888", lw=0.8))
    a2.axhline(T, color="#888", ls="--", lw=0.8)
    a2.set_ylim(12.5, 16.6)
    a2.set_xlabel("n")
    a2.set_ylabel("naive loads / tiled loads")
    a2.set_title(f"Saving with TILE = {T}: n / ceil_div(n, {T}), at most {T}×", fontsize=10)
    a2.grid(alpha=0.3)
    fig.tight_layout()
    save(fig, "global_loads.png")


# --------------------------------------------------------------------------- races


def fig_sync_race() -> None:
    LOAD, COMP, WAIT = BLUE, GREEN, GREY
    scenarios = [
        ("both barriers", {
            0: [(0, 2, LOAD, "load t"), (2, 1, WAIT, ""), (3, 4, COMP, "compute t"), (7, 1, WAIT, ""), (8, 2, LOAD, "load t+1"), (10, 1, WAIT, "")],
            1: [(0, 3, LOAD, "load t"), (3, 5, COMP, "compute t"), (8, 3, LOAD, "load t+1")],
        }, [3, 8, 11], None),
        ("first barrier missing", {
            0: [(0, 2, LOAD, "load t"), (2, 4, COMP, "compute t"), (6, 2, WAIT, ""), (8, 2, LOAD, "load t+1")],
            1: [(0, 3, LOAD, "load t"), (3, 5, COMP, "compute t"), (8, 3, LOAD, "load t+1")],
        }, [8], ((2, 3), "warp 0 reads the half of tile t\nthat warp 1 has not stored yet")),
        ("second barrier missing", {
            0: [(0, 2, LOAD, "load t"), (2, 1, WAIT, ""), (3, 4, COMP, "compute t"), (7, 2, LOAD, "load t+1"), (9, 2, WAIT, "")],
            1: [(0, 3, LOAD, "load t"), (3, 5, COMP, "compute t"), (8, 3, LOAD, "load t+1")],
        }, [3, 11], ((7, 8), "warp 0 overwrites tile t with t+1\nwhile warp 1 still reads tile t")),
    ]
    fig, axes = plt.subplots(3, 1, figsize=(9.6, 6.2), sharex=True)
    for ax, (title, warps, barriers, conflict) in zip(axes, scenarios):
        for w, bars in warps.items():
            y = 1 - w
            for start, length, color, label in bars:
                ax.broken_barh([(start, length)], (y - 0.32, 0.64), fc=color, ec="white",
                               hatch="//" if color == WAIT else None)
                if label:
                    ax.text(start + length / 2, y, label, ha="center", va="center", fontsize=8.5, color="white")
        for b in barriers:
            ax.axvline(b, color="black", lw=1.5)
        if conflict:
            (c0, c1), txt = conflict
            ax.axvspan(c0, c1, color=RED, alpha=0.25)
            ax.text(11.4, 0.5, txt, va="center", fontsize=9, color=RED)
        ax.set_yticks([1, 0], ["warp 0", "warp 1"])
        ax.set_ylim(-0.6, 1.6)
        ax.set_title(title + ("" if conflict else ": every warp finishes a step before any warp starts the next"),
                     fontsize=10, loc="left", color=RED if conflict else "black")
        despine(ax)
    axes[-1].set_xlim(0, 16)
    axes[-1].set_xticks([])
    axes[-1].set_xlabel("time →   (black lines: __syncthreads; blue: store into the shared tile; green: read from it; grey: waiting)",
                        fontsize=9)
    fig.tight_layout()
    save(fig, "sync_race.png")


# --------------------------------------------------------------------------- boundaries


def fig_boundary() -> None:
    T = 16
    fig, axes = plt.subplots(1, 3, figsize=(11.6, 4.3))
    for ax, n in zip(axes, (127, 128, 129)):
        g = ceil_div(n, T)
        W = g * T
        img = np.zeros((W, W))
        img[:n, :n] = 1
        ax.pcolormesh(np.arange(W + 1), np.arange(W + 1), img,
                      cmap=ListedColormap([GREY, "#AFC3E3"]), vmin=0, vmax=1)
        for i in range(g + 1):
            ax.plot([i * T, i * T], [0, W], color="black", lw=0.8)
            ax.plot([0, W], [i * T, i * T], color="black", lw=0.8)
        threads = g * g * T * T
        idle = threads - n * n
        ax.set_title(f"n = {n}: grid {g}×{g} = {g * g} blocks\n{threads} threads for {n * n} outputs, "
                     f"{idle} idle ({100 * idle / threads:.1f}%)", fontsize=9)
        ax.set_xlim(0, 9 * T)
        ax.set_ylim(9 * T, 0)
        ax.set_aspect("equal")
        ax.set_xticks([0, 64, 128, 144])
        ax.set_yticks([0, 64, 128, 144])
        ax.tick_params(labelsize=8)
    fig.suptitle("C covered by 16×16 blocks (blue: real elements; grey: threads that must not store, "
                 "tile elements that must be zero-filled)", fontsize=10)
    fig.tight_layout()
    save(fig, "boundary_tiles.png")


# --------------------------------------------------------------------------- free transpose


def fig_free_transpose() -> None:
    N, d = 6, 4
    hj, hk = 4, 2  # highlight K[j=4][k=2] == K^T[k=2][j=4]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9.6, 3.9), gridspec_kw=dict(width_ratios=[d, N]))

    def draw(ax, rows, cols, off, title, hl):
        for r in range(rows):
            for c in range(cols):
                o = off(r, c)
                fc = ORANGE if (r, c) == hl else (LIGHT if (o // d) % 2 == 0 else "#F4F4F4")
                ax.add_patch(Rectangle((c, r), 1, 1, fc=fc, ec="#888"))
                ax.text(c + 0.5, r + 0.5, str(o), ha="center", va="center", fontsize=9)
        ax.set_xlim(0, cols)
        ax.set_ylim(rows, 0)
        ax.set_aspect("equal")
        ax.set_xticks(np.arange(cols) + 0.5, range(cols), fontsize=8)
        ax.set_yticks(np.arange(rows) + 0.5, range(rows), fontsize=8)
        ax.set_title(title, fontsize=9.5)
        ax.tick_params(length=0)

    draw(a1, N, d, lambda j, k: j * d + k, f"K as stored: N×d = {N}×{d}, row-major\nK[j][k] at offset j·d + k", (hj, hk))
    a1.set_xlabel("k  (head dim)")
    a1.set_ylabel("j  (key index)")
    draw(a2, d, N, lambda k, j: j * d + k, "Kᵀ read in place: d×N, no copy\nKᵀ[k][j] at offset j·d + k  (stride d along a row)", (hk, hj))
    a2.set_xlabel("j")
    a2.set_ylabel("k")
    fig.text(0.5, 0.02, f"Numbers are memory offsets. The orange cell is one float: K[{hj}][{hk}] = Kᵀ[{hk}][{hj}] "
             f"= K[{hj}·{d} + {hk}] = K[{hj * d + hk}]. Shading marks the rows of K.",
             ha="center", fontsize=9)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    save(fig, "free_transpose.png")


FIGURES = [fig_tiled_phases, fig_loads, fig_sync_race, fig_boundary, fig_free_transpose]


def main() -> None:
    check_counts()
    for f in FIGURES:
        f()
    print(f"module 02: wrote {len(FIGURES)} figures to {IMG}")


if __name__ == "__main__":
    main()

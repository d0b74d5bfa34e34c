"""Figures for module 05 (masking). Run: python modules/05_masking/make_figures.py [-v]

Tile counts are computed by walking the tiles exactly as the kernels do and checked against
the closed forms in the README; the worked-example numbers are checked against a direct
masked softmax. Output: PNGs in img/. With -v, prints the numbers the README quotes.
"""
from __future__ import annotations

import sys
from pathlib import Path

# figstyle (the shared style, in modules/) selects the Agg backend: import it before pyplot.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from figstyle import BLUE, GREEN, ORANGE, PURPLE, RED, ceil_div, saver  # noqa: E402

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import ListedColormap  # noqa: E402
from matplotlib.patches import Patch, Rectangle  # noqa: E402

IMG = Path(__file__).resolve().parent / "img"
save = saver(IMG)


# --------------------------------------------------------------------------- tile bookkeeping


def tile_class(r0: int, br: int, c0: int, bc: int, n: int) -> str:
    """'skip', 'full' or 'diag' for the tile of rows r0.. and keys c0.. under j <= i."""
    last_row = min(r0 + br, n) - 1
    last_key = min(c0 + bc, n) - 1
    if c0 > last_row:
        return "skip"  # every key of the tile is after every row of the block
    if last_key <= r0:
        return "full"  # every key is at or before the block's first row
    return "diag"


def causal_counts(n: int, br: int, bc: int) -> dict[str, int]:
    counts = {"skip": 0, "full": 0, "diag": 0}
    for r0 in range(0, n, br):
        for c0 in range(0, n, bc):
            counts[tile_class(r0, br, c0, bc, n)] += 1
    return counts


def processed_fraction(n: int, br: int, bc: int) -> float:
    c = causal_counts(n, br, bc)
    return (c["full"] + c["diag"]) / sum(c.values())


def self_check() -> None:
    # closed form (T_r + 1) / (2 T_r) when B_r is a multiple of B_c and N a multiple of B_r
    for n, br, bc in ((4096, 64, 32), (4096, 16, 16), (1024, 128, 64), (256, 64, 32)):
        tr = n // br
        assert abs(processed_fraction(n, br, bc) - (tr + 1) / (2 * tr)) < 1e-15
    # per row block i (0-based), the kernel's loop bound: ceil_div(min((i+1)*B_r, N), B_c) tiles
    for n in (1, 33, 129, 150, 4096):
        walked = sum(ceil_div(min(r0 + 64, n), 32) for r0 in range(0, n, 64))
        c = causal_counts(n, 64, 32)
        assert walked == c["full"] + c["diag"], n
    # worked example
    s = worked_scores()
    mask = np.tril(np.ones((4, 4), bool))
    sm = np.where(mask, s, -np.inf)
    p = np.exp(sm - sm.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    o = p @ V_EX
    assert np.allclose(np.round(o, 4), [[1, 0], [0.6698, 0.3302], [1.5093, 1.5093], [-0.1440, 0.7989]])


# --------------------------------------------------------------------------- worked example (module 04's)

Q_EX = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [-1.0, 0.0]])
K_EX = np.array([[0.0, 1.0], [1.0, 0.0], [2.0, 1.0], [-1.0, 1.0]])
V_EX = np.array([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0], [-1.0, 1.0]])


def worked_scores() -> np.ndarray:
    return Q_EX @ K_EX.T / np.sqrt(2)


# --------------------------------------------------------------------------- figures


def entry_map(n: int, br: int, bc: int) -> np.ndarray:
    """0 = kept score in a processed tile, 1 = masked score in a processed tile, 2 = skipped."""
    out = np.zeros((n, n), dtype=int)
    for r0 in range(0, n, br):
        for c0 in range(0, n, bc):
            cls = tile_class(r0, br, c0, bc, n)
            rows = slice(r0, min(r0 + br, n))
            cols = slice(c0, min(c0 + bc, n))
            if cls == "skip":
                out[rows, cols] = 2
            else:
                i = np.arange(rows.start, rows.stop)[:, None]
                j = np.arange(cols.start, cols.stop)[None, :]
                out[rows, cols] = np.where(j <= i, 0, 1)
    return out


def fig_causal_tiles() -> None:
    n = 256
    cmap = ListedColormap([BLUE, ORANGE, "#EEEEEE"])
    fig, axes = plt.subplots(1, 2, figsize=(9.6, 4.9))
    for ax, (br, bc, who) in zip(axes, ((64, 32, "flash_fwd_causal: B_r = 64, B_c = 32"),
                                        (16, 16, "square 16 × 16 tiles"))):
        em = entry_map(n, br, bc)
        ax.imshow(em, cmap=cmap, vmin=0, vmax=2, interpolation="nearest", extent=(0, n, n, 0))
        for x in range(0, n + 1, bc):
            ax.axvline(x, color="white", lw=0.7 if bc < 32 else 1.2)
        for y in range(0, n + 1, br):
            ax.axhline(y, color="white", lw=0.7 if br < 32 else 1.2)
        ax.plot([0, n], [0, n], color="black", lw=0.8, ls=":")
        c = causal_counts(n, br, bc)
        tot = sum(c.values())
        ax.set_title(f"{who}\n{c['full']} full + {c['diag']} diagonal tiles processed, "
                     f"{c['skip']} of {tot} skipped", fontsize=9)
        ax.set_xlabel("key j")
        ax.set_ylabel("query i")
        ax.set_xticks([0, 64, 128, 192, 256])
        ax.set_yticks([0, 64, 128, 192, 256])
    handles = [Patch(color=BLUE, label="score kept (j ≤ i)"),
               Patch(color=ORANGE, label="computed, then masked to −∞ (diagonal tiles)"),
               Patch(color="#DDDDDD", label="tile skipped: never loaded, never computed")]
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize=8.5, frameon=False)
    fig.suptitle(f"Causal attention, N = {n}: which tiles a block touches", fontsize=10.5)
    fig.tight_layout(rect=(0, 0.06, 1, 0.97))
    save(fig, "causal_tiles.png")


def fig_causal_fraction() -> None:
    ns = np.unique(np.round(np.logspace(np.log10(32), np.log10(16384), 90)).astype(int))
    fig, ax = plt.subplots(figsize=(8.6, 4.0))
    for (br, bc), col in (((16, 16), GREEN), ((64, 32), BLUE), ((128, 128), PURPLE)):
        frac = [processed_fraction(int(n), br, bc) for n in ns]
        ax.plot(ns, frac, color=col, lw=1.8, label=f"tiles processed, B_r = {br}, B_c = {bc}")
    ax.plot(ns, (ns + 1) / (2 * ns), color=RED, ls="--", lw=1.4, label="scores actually needed: (N + 1) / 2N")
    ax.axhline(0.5, color="#555", lw=0.8)
    n0 = 4096
    f0 = processed_fraction(n0, 64, 32)
    ax.plot([n0], [f0], "o", color=BLUE)
    ax.annotate(f"N = {n0}: {f0:.4f} = 65/128", (n0, f0), xytext=(-30, 38), textcoords="offset points",
                fontsize=8.5, color=BLUE, arrowprops=dict(arrowstyle="->", color=BLUE, lw=0.8))
    ax.set_xscale("log", base=2)
    ax.set_xticks([32, 128, 512, 2048, 8192])
    ax.set_xticklabels(["32", "128", "512", "2048", "8192"])
    ax.set_ylim(0.45, 1.02)
    ax.set_xlabel("sequence length N")
    ax.set_ylabel("fraction of the T_r × T_c tiles")
    ax.set_title("Causal masking: the work left after skipping tiles above the diagonal → 1/2", fontsize=10)
    ax.legend(fontsize=8.3, loc="upper right")
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    save(fig, "causal_fraction.png")


def fig_padding() -> None:
    n, bc = 70, 32
    lengths = (70, 33, 1)
    fig, ax = plt.subplots(figsize=(9.6, 2.9))
    for b, ln in enumerate(lengths):
        y = len(lengths) - 1 - b
        for j in range(n):
            real = j < ln
            tile = j // bc
            processed = tile < ceil_div(ln, bc)
            if real:
                fc = BLUE
            elif processed:
                fc = ORANGE
            else:
                fc = "#E4E4E4"
            ax.add_patch(Rectangle((j, y * 1.5), 1, 1, fc=fc, ec="white", lw=0.4))
        ax.text(-1.5, y * 1.5 + 0.5, f"b = {b}: key_lengths[b] = {ln}", ha="right", va="center", fontsize=8.5)
        ax.text(n + 1.5, y * 1.5 + 0.5, f"{ceil_div(ln, bc)} of {ceil_div(n, bc)} key tiles", va="center", fontsize=8.5)
    for x in range(0, n + 1, bc):
        ax.axvline(x, color="black", lw=0.8, ls=":")
    ax.set_xlim(-32, n + 22)
    ax.set_ylim(-0.9, len(lengths) * 1.5 + 0.2)
    ax.axis("off")
    handles = [Patch(color=BLUE, label="valid key"),
               Patch(color=ORANGE, label="padding inside a processed tile: score −∞"),
               Patch(color="#E4E4E4", label="padding tile: skipped")]
    ax.legend(handles=handles, loc="lower center", ncol=3, fontsize=8.3, frameon=False, bbox_to_anchor=(0.5, -0.14))
    ax.set_title(f"Key padding, N = {n}, key tiles of {bc} (dotted lines): the same mask for every query and head",
                 fontsize=9.5)
    fig.tight_layout()
    save(fig, "padding.png")


def fig_mask_leak() -> None:
    s = worked_scores()[0]  # row 0 of the worked example
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9.6, 3.5), sharey=True)
    x = np.arange(4)
    w = 0.38
    # partially padded row: key_lengths = 3
    for ax, ln, title in ((a1, 3, "row 0, key_lengths = 3: both masks agree"),
                          (a2, 0, "row 0, key_lengths = 0: the −1e30 mask leaks")):
        keep = x < ln
        inf_scores = np.where(keep, s, -np.inf)
        big_scores = np.where(keep, s, -1e30)
        if keep.any():
            p_inf = np.exp(inf_scores - inf_scores.max())
            p_inf /= p_inf.sum()
        else:
            p_inf = np.zeros(4)  # ℓ = 0 → no weights, O = 0, L = −∞
        p_big = np.exp(big_scores - big_scores.max())
        p_big /= p_big.sum()
        ax.bar(x - w / 2, p_inf, w, color=BLUE, label="mask = −∞ (and ℓ = 0 ⇒ O = 0)")
        ax.bar(x + w / 2, p_big, w, color=RED, label="mask = −1e30")
        for xi, a, b in zip(x, p_inf, p_big):
            ax.text(xi - w / 2, a + 0.02, f"{a:.3f}", ha="center", fontsize=7.5, color=BLUE)
            ax.text(xi + w / 2, b + 0.02, f"{b:.3f}", ha="center", fontsize=7.5, color=RED)
        o_inf = p_inf @ V_EX
        o_big = p_big @ V_EX
        ax.text(1.5, 0.86, f"O (−∞) = ({o_inf[0]:.4f}, {o_inf[1]:.4f})\nO (−1e30) = ({o_big[0]:.4f}, {o_big[1]:.4f})",
                ha="center", va="top", fontsize=8.3)
        ax.set_xticks(x)
        ax.set_xticklabels([f"key {j}" + ("" if j < ln else "\n(padding)") for j in x], fontsize=8)
        ax.set_title(title, fontsize=9.5)
        ax.set_ylim(0, 0.95)
    a1.set_ylabel("attention weight P_0j")
    a1.legend(fontsize=8, loc="upper left", bbox_to_anchor=(0.0, 0.8))
    fig.tight_layout()
    save(fig, "mask_leak.png")


FIGURES = [fig_causal_tiles, fig_causal_fraction, fig_padding, fig_mask_leak]


def print_numbers() -> None:
    for n, br, bc in ((256, 64, 32), (4096, 64, 32), (4096, 16, 16), (4096, 128, 128), (129, 64, 32), (150, 64, 32)):
        c = causal_counts(n, br, bc)
        tot = sum(c.values())
        processed_scores = 0
        for r0 in range(0, n, br):
            for c0 in range(0, n, bc):
                if tile_class(r0, br, c0, bc, n) != "skip":
                    processed_scores += (min(r0 + br, n) - r0) * (min(c0 + bc, n) - c0)
        useful = n * (n + 1) // 2
        print(f"N={n} B_r={br} B_c={bc}: {c} processed {c['full'] + c['diag']}/{tot} = "
              f"{(c['full'] + c['diag']) / tot:.4f}; scores computed {processed_scores}, needed {useful}, "
              f"wasted {1 - useful / processed_scores:.4f}")
    for d, full, causal in ((64, 292, 254), (128, 356, 303)):
        print(f"FA2 d={d}: causal time / full time = {full / (2 * causal):.3f}")
    print(f"naive PyTorch d=64: causal time / full time = {43 / (2 * 12):.3f}")


def main() -> None:
    self_check()
    for f in FIGURES:
        f()
    if "-v" in sys.argv:
        print_numbers()
    print(f"module 05: wrote {len(FIGURES)} figures to {IMG}")


if __name__ == "__main__":
    main()

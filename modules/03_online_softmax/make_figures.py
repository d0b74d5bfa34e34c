"""Figures for module 03 (online softmax). Run: python modules/03_online_softmax/make_figures.py

The states (m, ℓ) drawn here are computed by the same recurrences the README derives, and
checked against a two-pass softmax before anything is drawn. Output: PNGs in img/.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

# figstyle (the shared style, in modules/) selects the Agg backend: import it before pyplot.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from figstyle import BLUE, GREEN, GREY, LIGHT, ORANGE, PURPLE, RED, saver  # noqa: E402

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.patches import FancyBboxPatch, Rectangle  # noqa: E402

IMG = Path(__file__).resolve().parent / "img"
save = saver(IMG)

WORKED = np.array([2.0, 1.0, 4.0, 3.0, 0.5, 6.0, 5.0, 1.5])  # the README's worked example


# --------------------------------------------------------------------------- the algebra

NEG_INF = -math.inf


def scale_of(m_part: float, m: float) -> float:
    """e^{m_part - m}, with an empty part (m_part = -inf) contributing 0, never NaN."""
    return 0.0 if m_part == NEG_INF else math.exp(m_part - m)


def merge(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    m = max(a[0], b[0])
    if m == NEG_INF:  # both empty
        return (NEG_INF, 0.0)
    return (m, a[1] * scale_of(a[0], m) + b[1] * scale_of(b[0], m))


def state(xs) -> tuple[float, float]:
    out = (NEG_INF, 0.0)
    for v in xs:
        out = merge(out, (float(v), 1.0))  # a single element x is the state (x, 1)
    return out


def online_trace(x, rescale: bool = True):
    """Running (m_j, ℓ_j) after each element; rescale=False is the classic bug."""
    m, l, ms, ls = NEG_INF, 0.0, [], []
    for v in x:
        m_new = max(m, v)
        l = (l * scale_of(m, m_new) if rescale else l) + math.exp(v - m_new)
        m = m_new
        ms.append(m)
        ls.append(l)
    return np.array(ms), np.array(ls)


def demo_row() -> np.ndarray:
    """32 scores with an upward drift, so the running max moves several times."""
    rng = np.random.default_rng(24)
    return np.round(0.12 * np.arange(32) + rng.normal(0.0, 1.0, 32), 2)


def self_check() -> None:
    for x in (WORKED, demo_row()):
        m, l = online_trace(x)
        assert m[-1] == x.max() and abs(l[-1] - np.exp(x - x.max()).sum()) < 1e-12
        parts = [x[i:i + 3] for i in range(0, len(x), 3)] + [x[:0]]
        tot = (NEG_INF, 0.0)
        for p in parts:
            tot = merge(tot, state(p))
        assert tot[0] == m[-1] and abs(tot[1] - l[-1]) < 1e-12


# --------------------------------------------------------------------------- trace


def fig_online_trace() -> None:
    x = demo_row()
    m, l = online_trace(x)
    j = np.arange(len(x))
    jumps = np.flatnonzero(np.diff(np.concatenate([[NEG_INF], m])) > 0)
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(9.4, 5.6), sharex=True, gridspec_kw=dict(height_ratios=[1.2, 1]))
    a1.bar(j, x, color=[ORANGE if i in jumps else "#9BB5DC" for i in j], width=0.7, label="x_j (orange: raises the max)")
    a1.step(j, m, where="post", color=RED, lw=2, label="running max m_j")
    a1.axhline(0, color="#888", lw=0.6)
    a1.set_ylabel("score")
    a1.legend(fontsize=8.5, loc="upper left")
    a1.set_title(f"One pass over a row of {len(x)} scores: m and ℓ after each element", fontsize=10.5)
    a2.plot(j, l, "-o", color=BLUE, ms=4, label="running sum ℓ_j: sum over i ≤ j of exp(x_i − m_j)")
    for i in jumps[1:]:
        before = l[i - 1] * math.exp(m[i - 1] - m[i])
        a2.annotate("", xy=(i, before), xytext=(i - 1, l[i - 1]),
                    arrowprops=dict(arrowstyle="->", color=RED, lw=1.2))
        a2.plot([i, i], [before, l[i]], ls=":", color=ORANGE, lw=1.5)
    a2.plot([], [], color=RED, label="rescale: ℓ · exp(m_old − m_new) when the max rises")
    a2.plot([], [], ls=":", color=ORANGE, label="then + exp(x_j − m_j) = 1 for the new max itself")
    two_pass = np.exp(x - x.max()).sum()
    a2.axhline(two_pass, color=GREEN, ls="--", lw=1)
    a2.text(0, two_pass + 0.15, f"two-pass value Σ exp(x − max) = {two_pass:.4f}", color=GREEN, fontsize=8.5)
    a2.set_ylabel("ℓ")
    a2.set_xlabel("element j")
    a2.set_ylim(0.5, 7.6)
    a2.legend(fontsize=8, loc="upper left", ncol=2)
    fig.tight_layout()
    save(fig, "online_trace.png")


# --------------------------------------------------------------------------- butterfly


def fig_butterfly() -> None:
    lanes = 8
    vals = np.array([3, 7, 1, 4, 8, 2, 6, 5])
    offsets = [4, 2, 1]
    cols = [vals.copy()]
    for o in offsets:
        cur = cols[-1]
        cols.append(np.array([max(cur[i], cur[i ^ o]) for i in range(lanes)]))
    fig, ax = plt.subplots(figsize=(8.0, 4.3))
    xs = np.arange(len(cols)) * 4.0
    for s, o in enumerate(offsets):
        for i in range(lanes):
            p = i ^ o
            ax.annotate("", xy=(xs[s + 1] - 0.35, -i), xytext=(xs[s] + 0.35, -p),
                        arrowprops=dict(arrowstyle="->", color=PURPLE, lw=0.9, alpha=0.7))
            ax.plot([xs[s] + 0.35, xs[s + 1] - 0.35], [-i, -i], color="#BBBBBB", lw=0.8, zorder=0)
        ax.text((xs[s] + xs[s + 1]) / 2, 0.75, f"p = __shfl_xor_sync(\n   FULL_MASK, v, {o});\nv = fmaxf(v, p);",
                ha="center", fontsize=8, family="monospace")
    for c, col in enumerate(cols):
        for i in range(lanes):
            done = c == len(cols) - 1
            ax.add_patch(plt.Circle((xs[c], -i), 0.33, fc=GREEN if done else LIGHT, ec="#333"))
            ax.text(xs[c], -i, str(col[i]), ha="center", va="center", fontsize=10)
    for i in range(lanes):
        ax.text(xs[0] - 0.7, -i, f"lane {i}", ha="right", va="center", fontsize=9)
    ax.text(xs[-1] + 0.6, -3.5, "every lane\nholds the max\nafter log₂(8) = 3\nsteps\n\n(a warp of 32:\n5 steps, offsets\n16, 8, 4, 2, 1)",
            va="center", fontsize=9)
    ax.text(xs[0] - 2.1, -lanes + 0.1, "Gray: a lane's own value; purple: the value it receives from lane i XOR offset.",
            fontsize=8.5, color="#444")
    ax.set_xlim(xs[0] - 2.2, xs[-1] + 3.2)
    ax.set_ylim(-lanes + 0.0, 2.2)
    ax.set_aspect("equal")
    ax.axis("off")
    fig.tight_layout()
    save(fig, "butterfly.png", tight=True)


# --------------------------------------------------------------------------- merge tree


def fmt(s: tuple[float, float]) -> str:
    m = "−∞" if s[0] == NEG_INF else f"{s[0]:g}"
    return f"m = {m}\nℓ = {s[1]:.4f}"


def fig_merge_tree() -> None:
    x = WORKED
    chunks = [x[0:2], x[2:4], x[4:6], x[6:8], x[:0]]
    names = ["A", "B", "C", "D", "E (empty)"]
    leaves = [state(c) for c in chunks]
    ab, cd = merge(leaves[0], leaves[1]), merge(leaves[2], leaves[3])
    abcd = merge(ab, cd)
    final = merge(abcd, leaves[4])
    fig, ax = plt.subplots(figsize=(10.2, 5.0))

    def node(cx, cy, title, s, color="#F4F4F4"):
        ax.add_patch(FancyBboxPatch((cx - 0.95, cy - 0.5), 1.9, 1.0, boxstyle="round,pad=0.05", fc=color, ec="#555"))
        ax.text(cx, cy + 0.28, title, ha="center", va="center", fontsize=8.5, weight="bold")
        ax.text(cx, cy - 0.12, fmt(s), ha="center", va="center", fontsize=8.5)

    def edge(p, q):
        ax.plot([p[0], q[0]], [p[1] - 0.55, q[1] + 0.55], color="#777", lw=1)

    lx = [0, 2.3, 4.6, 6.9, 9.2]
    for cx, nm, c, s in zip(lx, names, chunks, leaves):
        title = f"{nm}: [" + ", ".join(f"{v:g}" for v in c) + "]" if len(c) else nm
        node(cx, 0, title, s, LIGHT if len(c) else GREY)
    p_ab, p_cd, p_all, p_fin = (1.15, 2), (5.75, 2), (3.45, 4), (6.3, 5.6)
    node(*p_ab, "A ⊕ B", ab)
    node(*p_cd, "C ⊕ D", cd)
    node(*p_all, "(A⊕B) ⊕ (C⊕D)", abcd)
    node(*p_fin, "… ⊕ E", final, "#CDE8D3")
    edge(p_ab, (lx[0], 0)); edge(p_ab, (lx[1], 0))
    edge(p_cd, (lx[2], 0)); edge(p_cd, (lx[3], 0))
    edge(p_all, p_ab); edge(p_all, p_cd)
    edge(p_fin, p_all); edge(p_fin, (lx[4], 0))
    seq_m, seq_l = online_trace(x)
    ax.text(8.0, 3.2, f"Left to right, one element at a time\n(the online pass): m = {seq_m[-1]:g}, ℓ = {seq_l[-1]:.4f}\n"
            "Any grouping, any order: same state.\nMerging the empty state changes nothing.",
            fontsize=9, va="center")
    ax.set_xlim(-1.2, 11.6)
    ax.set_ylim(-0.8, 6.3)
    ax.axis("off")
    ax.set_title("Merging partial states of disjoint key sets (scores of the worked example, chunks of 2)", fontsize=10)
    fig.tight_layout()
    save(fig, "merge_tree.png")


# --------------------------------------------------------------------------- lane layout


def fig_lane_stride() -> None:
    cols, W = 80, 32
    cmap = plt.get_cmap("hsv")
    fig, ax = plt.subplots(figsize=(10.4, 2.2))
    passes = math.ceil(cols / W)
    for j in range(passes * W):
        r, lane = divmod(j, W)
        inside = j < cols
        ax.add_patch(Rectangle((lane, -r), 1, 1, fc=cmap(lane / W) if inside else "white",
                               ec="#999", alpha=0.45 if inside else 1))
        if inside:
            ax.text(lane + 0.5, -r + 0.5, str(j), ha="center", va="center", fontsize=6.5)
    for r in range(passes):
        ax.text(-0.4, -r + 0.5, f"step {r}: j = {r * W} + lane", ha="right", va="center", fontsize=8.5)
    ax.text(0, 1.35, "lane →  0 … 31   (each column is one lane's strided slice: j = lane, lane + 32, lane + 64, …)",
            fontsize=9)
    ax.text(0, -passes + 0.6, f"cols = {cols}: lanes 0–15 see 3 elements, lanes 16–31 see 2. "
            "In each step the 32 lanes read 32 consecutive floats: one coalesced warp load.",
            fontsize=8.5, va="center")
    ax.set_xlim(-9.5, W + 0.2)
    ax.set_ylim(-passes + 0.2, 1.9)
    ax.set_aspect("equal")
    ax.axis("off")
    fig.tight_layout()
    save(fig, "lane_stride.png", tight=True)


# --------------------------------------------------------------------------- the common bug


def fig_missing_rescale() -> None:
    x = demo_row()
    m, l = online_trace(x)
    _, l_bug = online_trace(x, rescale=False)
    y = np.exp(x - m[-1]) / l[-1]
    y_bug = np.exp(x - m[-1]) / l_bug[-1]
    j = np.arange(len(x))
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10.4, 3.8), gridspec_kw=dict(width_ratios=[1.7, 1]))
    a1.bar(j, y, color=GREEN, width=0.7, label=f"correct y (sums to {y.sum():.3f})")
    a1.plot(j, y_bug, "o", color=RED, ms=4, label=f"ℓ never rescaled (sums to {y_bug.sum():.3f})")
    a1.set_xlabel("element j")
    a1.set_ylabel("softmax output")
    a1.legend(fontsize=8.5, loc="upper left")
    a1.set_title("Same row as above: forgetting the rescale of ℓ", fontsize=10)
    a2.plot(j, l, "-", color=BLUE, label="ℓ_j, rescaled")
    a2.plot(j, l_bug, "-", color=RED, label="ℓ_j, not rescaled")
    a2.set_xlabel("element j")
    a2.set_title(f"final ℓ: {l[-1]:.3f} vs {l_bug[-1]:.3f}\nevery output off by the same factor {l[-1] / l_bug[-1]:.3f}",
                 fontsize=9.5)
    a2.legend(fontsize=8.5)
    fig.tight_layout()
    save(fig, "missing_rescale.png")


FIGURES = [fig_online_trace, fig_butterfly, fig_merge_tree, fig_lane_stride, fig_missing_rescale]


def main() -> None:
    self_check()
    for f in FIGURES:
        f()
    print(f"module 03: wrote {len(FIGURES)} figures to {IMG}")


if __name__ == "__main__":
    main()

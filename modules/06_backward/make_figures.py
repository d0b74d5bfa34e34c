"""Figures for module 06 (backward). Run: python modules/06_backward/make_figures.py [-v]

The gradients of the worked example are computed from the formulas the README derives and
checked against central finite differences before anything is drawn. Output: PNGs in img/.
With -v, prints the numbers the README quotes.
"""
from __future__ import annotations

import sys
from pathlib import Path

# figstyle (the shared style, in modules/) selects the Agg backend: import it before pyplot.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from figstyle import BLUE, GREY, ORANGE, RED, saver  # noqa: E402

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.patches import FancyArrowPatch, Rectangle  # noqa: E402

from grader.device import H100_SXM  # noqa: E402

IMG = Path(__file__).resolve().parent / "img"
save = saver(IMG)

FLOAT = 4
GiB = 2**30
MiB = 2**20

# module 01's worked example, plus an upstream gradient dO
Q_EX = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
K_EX = np.array([[1.0, 2.0], [0.0, 1.0], [-1.0, 0.0]])
V_EX = np.array([[1.0, 0.0], [0.0, 2.0], [3.0, 1.0]])
DO_EX = np.array([[1.0, 0.0], [0.0, -1.0], [1.0, 1.0]])


# --------------------------------------------------------------------------- the maths


def forward(q, k, v, dtype=np.float64):
    q, k, v = (np.asarray(x, dtype) for x in (q, k, v))
    scale = dtype(1.0 / np.sqrt(q.shape[1]))
    s = scale * (q @ k.T)
    m = s.max(axis=1, keepdims=True)
    e = np.exp(s - m)
    ell = e.sum(axis=1, keepdims=True)
    p = e / ell
    return p @ v, (m + np.log(ell))[:, 0], p


def backward(q, k, v, do):
    """The FlashAttention backward in float64, from the saved L only."""
    scale = 1.0 / np.sqrt(q.shape[1])
    o, lse, _ = forward(q, k, v)
    p = np.exp(scale * q @ k.T - lse[:, None])  # recomputed from L
    d_rows = (do * o).sum(axis=1)
    dv = p.T @ do
    dp = do @ v.T
    ds = p * (dp - d_rows[:, None])
    dq = scale * ds @ k
    dk = scale * ds.T @ q
    return dict(O=o, L=lse, P=p, D=d_rows, dP=dp, dS=ds, dQ=dq, dK=dk, dV=dv)


def loss(q, k, v, do, dtype=np.float64):
    """A scalar whose gradient with respect to O is exactly dO: sum(O * dO)."""
    o, _, _ = forward(q, k, v, dtype)
    return (o * np.asarray(do, dtype)).sum(dtype=dtype)


def central_difference(which: str, idx, h: float, dtype=np.float64) -> float:
    args = {"Q": Q_EX, "K": K_EX, "V": V_EX}
    base = np.asarray(args[which], dtype)
    plus, minus = base.copy(), base.copy()
    plus[idx] = base[idx] + dtype(h)
    minus[idx] = base[idx] - dtype(h)
    step = float(plus[idx]) - float(minus[idx])  # the perturbation actually stored
    lp = loss(**{**{"q": Q_EX, "k": K_EX, "v": V_EX}, which.lower(): plus}, do=DO_EX, dtype=dtype)
    lm = loss(**{**{"q": Q_EX, "k": K_EX, "v": V_EX}, which.lower(): minus}, do=DO_EX, dtype=dtype)
    if step == 0.0:  # h below half an ulp of the entry: no perturbation at all
        return float("nan")
    return (float(lp) - float(lm)) / step


def self_check() -> None:
    g = backward(Q_EX, K_EX, V_EX, DO_EX)
    assert np.allclose(g["D"], (g["P"] * g["dP"]).sum(axis=1), atol=1e-14)
    assert np.allclose(g["dS"].sum(axis=1), 0, atol=1e-14)
    assert np.allclose(g["dK"].sum(axis=0), 0, atol=1e-14)
    for which in ("Q", "K", "V"):
        for idx in np.ndindex(3, 2):
            fd = central_difference(which, idx, 1e-5)
            assert abs(fd - g["d" + which][idx]) < 1e-9, (which, idx)


# --------------------------------------------------------------------------- figures


def fig_bwd_tiles() -> None:
    t = 4
    fig, axes = plt.subplots(1, 3, figsize=(11.4, 3.9))
    titles = ["dK/dV kernel: block j owns key tile j,\nwalks down the query tiles",
              "dQ kernel: block i owns query tile i,\nwalks across the key tiles",
              "causal: only tiles on or below the diagonal\n(diagonal tiles masked inside)"]
    for ax, title, mode in zip(axes, titles, ("kv", "q", "causal")):
        for i in range(t):
            for j in range(t):
                y = t - 1 - i
                fc = "#F2F2F2"
                if mode == "kv" and j == 2:
                    fc = ORANGE
                if mode == "q" and i == 1:
                    fc = BLUE
                if mode == "causal":
                    fc = "#F2F2F2" if j > i else (RED if j == i else "#C9D6EA")
                ax.add_patch(Rectangle((j, y), 1, 1, fc=fc, ec="white", lw=2))
        if mode == "kv":
            ax.add_patch(FancyArrowPatch((2.5, t - 0.1), (2.5, 0.1), arrowstyle="-|>", mutation_scale=11, color="black"))
            for i in range(t):
                y = t - 1 - i + 0.5
                ax.add_patch(FancyArrowPatch((2.05, y), (-0.35, y), arrowstyle="-|>", mutation_scale=8,
                                             color=RED, lw=0.9, ls="--"))
                ax.text(-0.45, y, f"dQ{i + 1}", ha="right", va="center", fontsize=8, color=RED)
            ax.text(2.5, -0.25, "dK_j, dV_j stay on chip, written once;\ndQ_i += … by atomicAdd (red)",
                    ha="center", va="top", fontsize=8.2)
        elif mode == "q":
            y = t - 1 - 1 + 0.5
            ax.add_patch(FancyArrowPatch((0.1, y), (t - 0.1, y), arrowstyle="-|>", mutation_scale=11, color="black"))
            ax.text(t / 2, -0.25, "recomputes S, P, dP of its row of tiles;\ndQ_i stays on chip, written once",
                    ha="center", va="top", fontsize=8.2)
        else:
            for j in range(t):
                ax.add_patch(FancyArrowPatch((j + 0.5, t - 1 - j + 0.9), (j + 0.5, 0.1), arrowstyle="-|>",
                                             mutation_scale=9, color="black", lw=0.8, alpha=0.6))
            ax.text(t / 2, -0.25, "dK/dV block j starts at query tile j;\ndQ block i stops at key tile i",
                    ha="center", va="top", fontsize=8.2)
        for j in range(t):
            ax.text(j + 0.5, t + 0.08, f"K{j + 1}", ha="center", va="bottom", fontsize=8)
        if mode != "kv":
            for i in range(t):
                ax.text(-0.08, t - 1 - i + 0.5, f"Q{i + 1}", ha="right", va="center", fontsize=8)
        ax.set_title(title, fontsize=9.2)
        ax.set_xlim(-1.3, t + 0.2)
        ax.set_ylim(-1.3, t + 0.5)
        ax.set_aspect("equal")
        ax.axis("off")
    fig.tight_layout()
    save(fig, "bwd_tiles.png")


def fig_memory_saved() -> None:
    bh, d = 64, 64  # B = 4, H = 16
    ns = 2.0 ** np.arange(9, 17)
    p_bytes = bh * ns**2 * FLOAT
    l_bytes = bh * ns * FLOAT
    qkvo = 4 * bh * ns * d * FLOAT
    fig, ax = plt.subplots(figsize=(8.4, 4.0))
    ax.plot(ns, p_bytes / MiB, "-o", color=RED, label="P, saved by a standard backward: B·H·N² floats")
    ax.plot(ns, qkvo / MiB, "-s", color=GREY, label="Q, K, V, O (saved either way): 4·B·H·N·d floats")
    ax.plot(ns, l_bytes / MiB, "-o", color=BLUE, label="L, saved by FlashAttention: B·H·N floats")
    n0 = 4096
    ax.annotate(f"N = {n0}: P = {bh * n0 * n0 * FLOAT / GiB:.0f} GiB", (n0, bh * n0 * n0 * FLOAT / MiB), xytext=(-150, 10),
                textcoords="offset points", fontsize=8.5, color=RED, arrowprops=dict(arrowstyle="->", color=RED, lw=0.8))
    ax.annotate(f"L = {bh * n0 * FLOAT / MiB:.0f} MiB", (n0, bh * n0 * FLOAT / MiB), xytext=(15, -22),
                textcoords="offset points", fontsize=8.5, color=BLUE, arrowprops=dict(arrowstyle="->", color=BLUE, lw=0.8))
    hbm = H100_SXM.hbm_gb * 1e9
    ax.axhline(hbm / MiB, color="#555", ls=":", lw=1)
    ax.text(2**13.9, hbm / MiB * 1.5, f"{H100_SXM.hbm_gb} GB: all of an H100's memory", fontsize=8, ha="right")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequence length N")
    ax.set_ylabel("MiB (fp32)")
    ax.set_title("What the forward keeps for the backward, B = 4, H = 16, d = 64", fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    save(fig, "memory_saved.png")


def fig_finite_difference() -> None:
    g = backward(Q_EX, K_EX, V_EX, DO_EX)
    exact = g["dQ"][0, 0]
    hs = np.logspace(-9, 0, 55)
    fig, ax = plt.subplots(figsize=(8.4, 4.1))
    for dtype, col, name in ((np.float64, BLUE, "float64"), (np.float32, ORANGE, "float32")):
        err = np.array([abs(central_difference("Q", (0, 0), h, dtype) - exact) for h in hs])
        ok = np.isfinite(err)
        err = np.maximum(err, 1e-17)
        ax.plot(hs[ok], err[ok], "-o", ms=3, color=col, label=f"{name}: |central difference − analytic dQ[0,0]|")
        eps = np.finfo(dtype).eps
        h_opt = eps ** (1 / 3)
        ax.axvline(h_opt, color=col, ls=":", lw=1)
        ax.text(h_opt * 1.15, 1e-13 if dtype is np.float64 else 3e-3, f"h ≈ ε^(1/3) = {h_opt:.0e}", color=col, fontsize=8)
    ax.plot(hs, 0.05 * hs**2, color="#777", ls="--", lw=1, label="truncation error ∝ h²")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(1e-14, 10)
    ax.set_xlabel("step h")
    ax.set_ylabel("absolute error")
    ax.set_title("Checking a gradient by finite differences: too small a step drowns in rounding", fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    save(fig, "finite_difference.png")


FIGURES = [fig_bwd_tiles, fig_memory_saved, fig_finite_difference]


def print_numbers() -> None:
    np.set_printoptions(precision=4, suppress=True)
    g = backward(Q_EX, K_EX, V_EX, DO_EX)
    for key in ("O", "L", "P", "D", "dP", "dS", "dV", "dQ", "dK"):
        print(key, "=\n", g[key])
    print("loss =", loss(Q_EX, K_EX, V_EX, DO_EX))
    for which, idx in (("Q", (0, 0)), ("K", (2, 1)), ("V", (1, 0))):
        fd = central_difference(which, idx, 1e-5)
        print(f"d{which}{idx}: fd {fd:.12f} analytic {g['d' + which][idx]:.12f} diff {fd - g['d' + which][idx]:.1e}")
    for h in (1e-2, 3e-3, 1e-3, 1e-4, 1e-5):
        print(f"float32 h={h:g}: error {abs(central_difference('Q', (0, 0), h, np.float32) - g['dQ'][0, 0]):.1e}")
    print("wrong D rowsum(dO*V):", (DO_EX * V_EX).sum(axis=1))
    # float non-determinism of an unordered sum (what atomics do)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(128).astype(np.float32)
    results = set()
    for _ in range(2000):
        acc = np.float32(0)
        for v in x[rng.permutation(128)]:
            acc = np.float32(acc + v)
        results.add(float(acc))
    print(f"128-term float32 sum in 2000 orders: {len(results)} distinct values, "
          f"spread {max(results) - min(results):.2e}, exact {float(x.astype(np.float64).sum()):.7f}")
    bh, n = 64, 4096
    print(f"P: {bh * n * n * FLOAT / GiB} GiB, L: {bh * n * FLOAT / MiB} MiB")


def main() -> None:
    self_check()
    for f in FIGURES:
        f()
    if "-v" in sys.argv:
        print_numbers()
    print(f"module 06: wrote {len(FIGURES)} figures to {IMG}")


if __name__ == "__main__":
    main()

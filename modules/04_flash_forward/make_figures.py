"""Figures for module 04 (FlashAttention forward). Run: python modules/04_flash_forward/make_figures.py

Every number drawn here comes from the formulas and the worked example in the README, and the
script checks them (tiled forward against a direct softmax, traffic formulas against each
other) before drawing, or from the committed GPU measurements in benchmarks/results/ (the
throughput chart). Output: PNGs in img/.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

# figstyle (the shared style, in modules/) selects the Agg backend: import it before pyplot.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from figstyle import BLUE, GREEN, GREY, ORANGE, PURPLE, RED, ceil_div, saver  # noqa: E402

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.patches import FancyArrowPatch, Rectangle  # noqa: E402

from grader.device import H100_SXM  # noqa: E402

IMG = Path(__file__).resolve().parent / "img"
RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
save = saver(IMG)

FLOAT = 4  # bytes
MiB = 2**20
KiB = 2**10


# --------------------------------------------------------------------------- the worked example

Q_EX = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [-1.0, 0.0]])
K_EX = np.array([[0.0, 1.0], [1.0, 0.0], [2.0, 1.0], [-1.0, 1.0]])
V_EX = np.array([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0], [-1.0, 1.0]])


def tiled_forward(q, k, v, bc, order=None):
    """The FA2 inner loop in float64: returns (O, L) and the (m, ℓ, acc) state after each tile."""
    n = k.shape[0]
    scale = 1.0 / np.sqrt(q.shape[1])
    s = scale * q @ k.T
    m = np.full(q.shape[0], -np.inf)
    ell = np.zeros(q.shape[0])
    acc = np.zeros_like(q)
    states = []
    starts = list(range(0, n, bc)) if order is None else [t * bc for t in order]
    for start in starts:
        blk = s[:, start:start + bc]
        m_new = np.maximum(m, blk.max(axis=1))
        alpha = np.exp(m - m_new)
        p = np.exp(blk - m_new[:, None])
        ell = alpha * ell + p.sum(axis=1)
        acc = alpha[:, None] * acc + p @ v[start:start + bc]
        m = m_new
        states.append((alpha.copy(), m.copy(), ell.copy(), acc.copy()))
    return acc / ell[:, None], m + np.log(ell), states


def self_check() -> None:
    s = Q_EX @ K_EX.T / np.sqrt(2)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    o_ref = p @ V_EX
    lse_ref = np.log(np.exp(s).sum(axis=1))
    for order in (None, [1, 0]):
        o, lse, _ = tiled_forward(Q_EX, K_EX, V_EX, 2, order)
        assert np.allclose(o, o_ref, atol=1e-14) and np.allclose(lse, lse_ref, atol=1e-14)
    # The README quotes these (rounded to 4 decimals).
    o, lse, _ = tiled_forward(Q_EX, K_EX, V_EX, 2)
    assert np.allclose(np.round(lse, 4), [2.0327, 1.9579, 2.5951, 1.3256])
    assert np.allclose(np.round(o[0], 4), [1.1440, 1.4078])
    # traffic formulas: FA2 with one query tile and FA1 (without the set-up and final passes)
    # with one key tile are the same kernel; the passes add one round trip of the state each
    n, d = 256, 64
    assert fa2_floats(n, d, n)[0] == 3 * n * d and fa1_floats(n, d, n, passes=False) == (3 * n * d, n * d + n)
    state = n * d + 2 * n
    r0, w0 = fa1_floats(n, d, 32, passes=False)
    assert fa1_floats(n, d, 32) == (r0 + 2 * state, w0 + 2 * state)


# --------------------------------------------------------------------------- traffic model (floats per head)


def naive_floats(n: int, d: int) -> int:
    """Module 01's three kernels with a perfect cache, each array crossing DRAM once per kernel:
    4N² + 4Nd."""
    return 4 * n * n + 4 * n * d


def naive_requested_floats(n: int, d: int) -> int:
    """Module 01's three kernels with no cache, every load the threads issue (what the emulator's
    count_io counts): 4N²d + 3N² reads, 2N² + Nd writes."""
    return 4 * n * n * d + 3 * n * n + 2 * n * n + n * d


def fa1_floats(n: int, d: int, bc: int, passes: bool = True) -> tuple[int, int]:
    """(reads, writes) of the FA1 loop order: K, V once; Q and the state (O, m, ℓ) read and
    written back once per key tile. passes=True is flash_fwd_fa1 as the course builds it: a pass
    that sets every row's state first and a pass that normalises O and writes L last.
    passes=False lets the first key tile write the state without reading it and the last one
    write the final O and L."""
    tc = ceil_div(n, bc)
    state = n * d + 2 * n
    if passes:
        return 2 * n * d + tc * (n * d + state) + state, (tc + 1) * state + n * d + n
    return 2 * n * d + tc * n * d + (tc - 1) * state, (tc - 1) * state + n * d + n


def fa2_floats(n: int, d: int, br: int) -> tuple[int, int]:
    """(reads, writes) of the FA2 loop order: Q once; all of K and V once per query tile; O, L once."""
    tr = ceil_div(n, br)
    return n * d + 2 * n * d * tr, n * d + n


def compulsory_floats(n: int, d: int) -> int:
    return 4 * n * d + n


def fa2_shared_bytes(d: int, br: int, bc: int) -> int:
    """flash_fwd_fa2's layout: Q tile, O accumulator, K and V tiles, S tile, m and ℓ."""
    return FLOAT * (2 * br * d + 2 * bc * d + br * bc + 2 * br)


def row_shared_bytes(d: int, bc: int) -> int:
    """flash_fwd_row / flash_fwd_fa1: a K tile and a V tile of bc keys."""
    return FLOAT * 2 * bc * d


# --------------------------------------------------------------------------- figures


def fig_loop_orders() -> None:
    tr, tc = 4, 6
    fig, axes = plt.subplots(1, 2, figsize=(10.2, 3.9))
    block_colors = [BLUE, ORANGE, GREEN, PURPLE]
    for ax, kind in zip(axes, ("FA1", "FA2")):
        for i in range(tr):
            for j in range(tc):
                y = tr - 1 - i
                if kind == "FA1":
                    step = j * tr + i + 1
                    fc = plt.cm.Blues(0.25 + 0.6 * (step - 1) / (tr * tc - 1))
                    label = str(step)
                else:
                    fc = block_colors[i]
                    label = str(j + 1)
                ax.add_patch(Rectangle((j, y), 1, 1, fc=fc, ec="white", lw=2, alpha=0.9 if kind == "FA2" else 1))
                ax.text(j + 0.5, y + 0.5, label, ha="center", va="center", fontsize=9,
                        color="white" if (kind == "FA2" or step > 10) else "black", weight="bold")
        ax.set_xlim(-1.6, tc + 0.2)
        ax.set_ylim(-1.25, tr + 0.55)
        ax.set_aspect("equal")
        ax.axis("off")
        for j in range(tc):
            ax.text(j + 0.5, tr + 0.15, f"K{j + 1},V{j + 1}", ha="center", va="bottom", fontsize=7.5)
        for i in range(tr):
            ax.text(-0.1, tr - 1 - i + 0.5, f"Q{i + 1}", ha="right", va="center", fontsize=8.5)
        if kind == "FA1":
            for j in range(tc):
                ax.add_patch(FancyArrowPatch((j + 0.13, tr - 0.08), (j + 0.13, 0.08), arrowstyle="-|>",
                                             mutation_scale=9, color=RED, lw=0.9, alpha=0.55))
            ax.set_title("FA1 order: one block per head\nouter loop over key tiles j, inner loop over query tiles i",
                         fontsize=9.5)
            ax.text(tc / 2, -0.35, "K_j, V_j are loaded once; every visit of tile (i, j) reads Q_i, O_i, m_i, ℓ_i\n"
                    "from global memory and writes O_i, m_i, ℓ_i back: T_c round trips of O per row",
                    ha="center", va="top", fontsize=8.3, color="#333")
        else:
            for i in range(tr):
                y = tr - 1 - i + 0.18
                ax.add_patch(FancyArrowPatch((0.1, y), (tc - 0.1, y), arrowstyle="-|>", mutation_scale=9,
                                             color="black", lw=0.9, alpha=0.45))
            ax.set_title("FA2 order: one block per query tile (rows run in parallel)\n"
                         "each block loops over key tiles j = 1 … T_c", fontsize=9.5)
            ax.text(tc / 2, -0.35, "O_i, m_i, ℓ_i stay on chip for the whole loop;\n"
                    "one write of O_i and L_i at the end. Numbers: step within a block",
                    ha="center", va="top", fontsize=8.3, color="#333")
    fig.tight_layout()
    save(fig, "loop_orders.png")


def fig_traffic_vs_tile() -> None:
    n, d = 4096, 64
    tiles = np.array([8, 16, 32, 64, 128, 256])
    to_mib = FLOAT / MiB
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10.4, 4.3), gridspec_kw=dict(width_ratios=[1.25, 1]))
    naive = naive_floats(n, d) * to_mib
    naive_req = naive_requested_floats(n, d) * to_mib
    fa1 = np.array([sum(fa1_floats(n, d, b)) for b in tiles]) * to_mib
    fa2 = np.array([sum(fa2_floats(n, d, b)) for b in tiles]) * to_mib
    a1.axhline(naive_req, color=RED, lw=2, label=f"naive (module 01), no cache: {naive_req / 1024:.1f} GiB")
    a1.axhline(naive, color=RED, lw=1.2, ls="--", label=f"naive, perfect cache: 4N² + 4Nd = {naive:.0f} MiB")
    a1.plot(tiles, fa1, "-s", color=ORANGE, label="FA1 order, against B_c")
    a1.plot(tiles, fa2, "-o", color=BLUE, label="FA2 order, against B_r")
    comp = compulsory_floats(n, d) * to_mib
    a1.axhline(comp, color=GREEN, ls="--", lw=1.2, label=f"compulsory: read Q, K, V, write O, L = {comp:.1f} MiB")
    marks = [("flash_fwd_fa2 (B_r = 16)", 16, sum(fa2_floats(n, d, 16)) * to_mib, BLUE, (-20, -48)),
             ("flash_fwd_row (B_r = 64)", 64, sum(fa2_floats(n, d, 64)) * to_mib, BLUE, (-95, -40)),
             ("flash_fwd_fa1 (B_c = 32)", 32, sum(fa1_floats(n, d, 32)) * to_mib, ORANGE, (-150, 40))]
    for text, x, y, c, off in marks:
        a1.plot([x], [y], "o", ms=11, mfc="none", mec=c, mew=1.8)
        a1.annotate(text, (x, y), xytext=off, textcoords="offset points", fontsize=7.8, color=c,
                    arrowprops=dict(arrowstyle="-", color=c, lw=0.8))
    a1.set_xscale("log", base=2)
    a1.set_yscale("log")
    a1.set_xticks(tiles)
    a1.set_xticklabels([str(t) for t in tiles])
    a1.set_xlabel("tile size (rows of Q per block for FA2, keys per tile for FA1)")
    a1.set_ylabel("global traffic per head, MiB (fp32)")
    a1.set_title(f"Traffic requested with no cache, N = {n}, d = {d}", fontsize=10)
    a1.set_ylim(2, 60000)
    a1.legend(fontsize=7.6, loc="upper right", bbox_to_anchor=(1.0, 0.85))
    a1.grid(alpha=0.3, which="both")

    for dd, ls in ((128, "--"), (64, "-")):
        sm = np.array([fa2_shared_bytes(dd, b, b) for b in tiles]) / KiB
        a2.plot(tiles, sm, ls, marker="o", color=BLUE, label=f"fa2 layout, B_r = B_c = B, d = {dd}")
    for dd, ls in ((128, "--"), (64, "-")):
        rw = np.array([row_shared_bytes(dd, b) for b in tiles]) / KiB
        a2.plot(tiles, rw, ls, marker="s", color=ORANGE, label=f"K and V tiles of B keys only, d = {dd}")
    static, optin = H100_SXM.static_shared_per_block // KiB, H100_SXM.max_shared_per_block_optin // KiB
    a2.axhline(static, color="#555", lw=1)
    a2.text(8.5, 52, f"{static} KiB: static / default dynamic limit per block", fontsize=7.6)
    a2.axhline(optin, color="#555", lw=1, ls=":")
    a2.text(8.5, 240, f"{optin} KiB: H100 opt-in maximum per block", fontsize=7.6)
    a2.set_xscale("log", base=2)
    a2.set_yscale("log")
    a2.set_xticks(tiles)
    a2.set_xticklabels([str(t) for t in tiles])
    a2.set_xlabel("tile size B")
    a2.set_ylabel("shared memory per block, KiB")
    a2.set_title("What a larger tile costs on chip (fp32)", fontsize=10)
    a2.legend(fontsize=7.2, loc="lower right", handlelength=3.2)
    a2.grid(alpha=0.3)
    fig.tight_layout()
    save(fig, "traffic_vs_tile.png")


def fig_fa2_block() -> None:
    d, br, bc = 64, 16, 16
    regions = [("Q tile\n16×d", br * d, BLUE), ("O accumulator\n16×d", br * d, GREEN),
               ("K_j\n16×d", bc * d, ORANGE), ("V_j\n16×d", bc * d, PURPLE),
               ("S\n16×16", br * bc, RED), ("m", br, "#777"), ("ℓ", br, "#AAA")]
    total = sum(r[1] for r in regions)
    assert total * FLOAT == fa2_shared_bytes(d, br, bc)
    fig = plt.figure(figsize=(10.0, 4.3))
    ax = fig.add_axes([0.03, 0.7, 0.94, 0.22])
    x = 0
    for name, size, c in regions:
        w = size / total
        ax.add_patch(Rectangle((x, 0), w, 1, fc=c, ec="white", lw=1.5, alpha=0.85))
        if w > 0.05:
            ax.text(x + w / 2, 0.5, name, ha="center", va="center", fontsize=8.5, color="white", weight="bold")
        x += w
    ax.annotate("S 16×16, m, ℓ", (1 - 0.03, 1.0), xytext=(0.86, 1.35), fontsize=8, ha="center",
                arrowprops=dict(arrowstyle="-", color="#555", lw=0.8))
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.6)
    ax.axis("off")
    ax.set_title(f"flash_fwd_fa2 dynamic shared memory at d = {d}: (2·16·d + 2·16·d + 16·16 + 2·16) floats "
                 f"= {total} floats = {total * FLOAT:,} bytes", fontsize=9.5, loc="left")

    a2 = fig.add_axes([0.05, 0.0, 0.36, 0.66])
    for y in range(br):
        for xx in range(bc):
            hl = y == 5 and xx == 9
            a2.add_patch(Rectangle((xx, br - 1 - y), 1, 1, fc=RED if hl else "#F3D6D7", ec="white", lw=0.8))
    a2.text(9.5, br - 1 - 5 + 0.5, "", ha="center")
    a2.annotate("thread (x = 9, y = 5)\ncomputes S[5][9] = scale·q_5·k_9", (9.5, br - 5 - 0.5), xytext=(16.6, 13.5),
                fontsize=8, arrowprops=dict(arrowstyle="->", color="#333", lw=0.9))
    a2.set_xlim(-0.5, 27)
    a2.set_ylim(-1.6, br + 1.2)
    a2.set_aspect("equal")
    a2.axis("off")
    a2.text(bc / 2, br + 0.3, "score tile: x → key (column), y → query row", ha="center", fontsize=8.5)
    a2.text(bc / 2, -1.3, "16 × 16 = 256 threads, one per score", ha="center", fontsize=8.5)

    a3 = fig.add_axes([0.52, 0.0, 0.46, 0.66])
    cols = d
    for y in range(4):
        for c in range(cols):
            owner = c % bc
            fc = GREEN if (y == 1 and owner == 9) else "#CFE5D4"
            a3.add_patch(Rectangle((c * 0.25, 3 - y), 0.25, 1, fc=fc, ec="white", lw=0.4))
    a3.text(8, 4.3, "O accumulator rows 0–3 of 16 (64 columns at d = 64)", ha="center", fontsize=8.5)
    a3.text(8, -0.7, "thread (x = 9, y = 1) updates columns 9, 25, 41, 57 of row 1:\n"
            "O[1][c] = α_1·O[1][c] + Σ_j P[1][j]·V_j[c]", ha="center", va="top", fontsize=8.3)
    a3.set_xlim(-0.3, 16.3)
    a3.set_ylim(-2.6, 5)
    a3.set_aspect("equal")
    a3.axis("off")
    save(fig, "fa2_block.png")


def fig_partial_tile() -> None:
    n, bc, br = 40, 32, 64
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(10.0, 3.3))
    # key tiles
    for j in range(64):
        tile = j // bc
        real = j < n
        fc = (BLUE if tile == 0 else ORANGE) if real else "#BBBBBB"
        a1.add_patch(Rectangle((j, 0), 1, 1, fc=fc, ec="white", lw=0.6))
    a1.text(16, 1.25, "key tile 0: keys 0–31 (all real)", ha="center", fontsize=8.5)
    a1.text(48, 1.25, "key tile 1: keys 32–39 real, slots 40–63 empty", ha="center", fontsize=8.5)
    a1.annotate("these 24 slots of the shared K/V tile hold NaN (the emulator poisons shared memory)\n"
                "or whatever the previous tile left (a GPU): their scores must be −∞ or never read",
                (52, 0), xytext=(52, -1.45), ha="center", va="top", fontsize=8.2,
                arrowprops=dict(arrowstyle="->", color="#333", lw=0.9))
    a1.set_xlim(-1, 65)
    a1.set_ylim(-2.9, 1.7)
    a1.axis("off")
    a1.set_title(f"N = {n}, key tiles of {bc}: the last tile is partial", fontsize=9.5, loc="left")
    # query rows of the block
    for t in range(br):
        real = t < n
        a2.add_patch(Rectangle((t, 0), 1, 1, fc=GREEN if real else "#BBBBBB", ec="white", lw=0.6))
    a2.text(20, 1.25, "threads 0–39 own query rows 0–39", ha="center", fontsize=8.5)
    a2.text(52, 1.25, "threads 40–63: no row", ha="center", fontsize=8.5)
    a2.annotate("still help load K/V tiles and reach every __syncthreads;\nnever read Q or write O, L",
                (52, 0), xytext=(52, -0.5), ha="center", va="top", fontsize=8.2,
                arrowprops=dict(arrowstyle="->", color="#333", lw=0.9))
    a2.set_xlim(-1, 65)
    a2.set_ylim(-1.9, 1.7)
    a2.axis("off")
    a2.set_title(f"flash_fwd_row, block of {br} threads for the same N", fontsize=9.5, loc="left")
    fig.tight_layout()
    save(fig, "partial_tile.png")


def measured_throughput() -> list[tuple[str, float, str]]:
    """(label, TFLOP/s, colour) at B = 4, H = 16, N = 4096, d = 64, forward, not causal, read from
    the committed H100 results: the course's kernel and SDPA in fp32 (bench records of
    gpu_evidence.json), SDPA's FlashAttention-2 and cuDNN backends in fp16 (primitives/tc_flash.json)."""
    bench = json.loads((RESULTS / "gpu_evidence.json").read_text())["bench"]
    tc = json.loads((RESULTS / "primitives" / "tc_flash.json").read_text())

    def pick(records, **want):
        (hit,) = [r for r in records if all(r.get(k) == v for k, v in want.items())]
        return hit

    shape = dict(d=64, causal=False, B=4, H=16, S=4096)
    row = pick(bench, kernel="flash_fwd_row", dtype="fp32", **shape)
    fp16 = pick(tc, kernel="tc_flash_fwd_d64", dtype="fp16", **shape)
    return [("flash_fwd_row, fp32\n(one thread per row: this module)", row["tflops"], ORANGE),
            (f"PyTorch SDPA, fp32\n({row['baseline_backend'].lower()} backend)", row["baseline_tflops"], GREY),
            ("PyTorch SDPA, fp16\n(FlashAttention-2 backend)", fp16["baseline_tflops"], BLUE),
            ("PyTorch SDPA, fp16\n(cuDNN backend)", fp16["cudnn_tflops"], PURPLE)]


def fig_perf_gap() -> None:
    rows = measured_throughput()
    fig, ax = plt.subplots(figsize=(9.0, 3.4))
    y = np.arange(len(rows))[::-1]
    ax.barh(y, [r[1] for r in rows], color=[r[2] for r in rows], height=0.6)
    for yy, (name, v, _) in zip(y, rows):
        ax.text(v * 1.12, yy, f"{v:.3g} TFLOP/s", va="center", fontsize=9)
    ax.set_yticks(y)
    ax.set_yticklabels([r[0] for r in rows], fontsize=8.5)
    ax.set_xscale("log")
    ax.set_xlim(0.5, 3000)
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.set_xlabel("TFLOP/s = 4·B·H·N²·d / time  (H100, B = 4, H = 16, N = 4096, d = 64, forward)")
    ax.set_title("Measured on the course's H100 (benchmarks/results); fp32 and fp16 rows are labelled", fontsize=9.5)
    ax.grid(alpha=0.3, axis="x", which="both")
    fig.tight_layout()
    save(fig, "perf_gap.png")


FIGURES = [fig_loop_orders, fig_traffic_vs_tile, fig_fa2_block, fig_partial_tile, fig_perf_gap]


def print_numbers() -> None:
    """The numbers the README quotes."""
    o, lse, states = tiled_forward(Q_EX, K_EX, V_EX, 2)
    np.set_printoptions(precision=4, suppress=True)
    print("S =\n", Q_EX @ K_EX.T / np.sqrt(2))
    for t, (alpha, m, ell, acc) in enumerate(states):
        print(f"after tile {t + 1}: alpha={alpha} m={m} l={ell}\n acc=\n{acc}")
    print("O =\n", o, "\nL =", lse)
    n, d = 4096, 64
    for name, fl in (("naive, no cache", naive_requested_floats(n, d)), ("naive, perfect cache", naive_floats(n, d)),
                     ("row (B_r=64)", sum(fa2_floats(n, d, 64))), ("fa1 (B_c=32)", sum(fa1_floats(n, d, 32))),
                     ("fa1 (B_c=32) without passes", sum(fa1_floats(n, d, 32, passes=False))),
                     ("fa2 (B_r=16)", sum(fa2_floats(n, d, 16))),
                     ("FA2 B_r=128", sum(fa2_floats(n, d, 128))), ("compulsory", compulsory_floats(n, d))):
        print(f"{name}: {fl * FLOAT / MiB:.1f} MiB per head")
    print("fa1 reads/writes (floats):", fa1_floats(n, d, 32), "fa2 B_r=64:", fa2_floats(n, d, 64))
    print(f"fa1 writes: {fa1_floats(n, d, 32)[1] * FLOAT / MiB:.1f} MiB, fa2: {fa2_floats(n, d, 16)[1] * FLOAT / MiB:.1f} MiB")
    for label, tflops, _ in measured_throughput():
        print(f"{label!r}: {tflops} TFLOP/s")
    for dd in (32, 64, 128):
        print(f"fa2 shared at d={dd}: {fa2_shared_bytes(dd, 16, 16)} B; row kernel K/V tiles: {row_shared_bytes(dd, 32)} B")


def main() -> None:
    self_check()
    for f in FIGURES:
        f()
    if "-v" in sys.argv:
        print_numbers()
    print(f"module 04: wrote {len(FIGURES)} figures to {IMG}")


if __name__ == "__main__":
    main()

"""Where the capstone's time goes, block by block: every block of one launch stamps the GPU's clocks
as it enters, once its first tile has landed, as each warp leaves the tile loop and once every warp
has issued its output stores, and names the SM it ran on. From the stamps: how long a block waits before its first
product, how long it spends per tile, how long its ending takes, the gap before the SM's next block,
and how long SMs sit idle at the end of the grid, when fewer blocks are left than SMs.

    PYTHONPATH=. python3 benchmarks/timeline_capstone.py gpu --out DIR     # on a GPU (about a minute)

Runs each (dtype, d, causal, S) of RUNS with its kept choices (capstone.json's records), warm (after
WARMUP launches), and writes DIR/capstone_timeline.json: per run the kept choices, the summary
(``summarise``) and, for the first run, each block's SM, entry and exit in microseconds (the
reading's timeline figure). The stamps go into a copy of the kernel (``stamped_source``); the graded
source is untouched.

``grids`` in the same file: the kernel as graded, timed with grader.bench beside SDPA flash at B = 1
and S = 4096 with GRID_HEADS heads and, beside each, the next count of heads whose blocks the SMs
divide evenly (every round full): how much each kernel loses to a ragged last round.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from profile_capstone import SHAPE as PROFILED, CapstoneLaunch  # noqa: E402

# d = 128, where the capstone falls short of SDPA flash: without a mask at every S, with it at the
# longer two.
SEQS = (4096, 16384, 32768)
RUNS = ([(dtype, 128, False, S) for dtype in ("fp16", "bf16") for S in SEQS]
        + [(dtype, 128, True, S) for dtype in ("fp16", "bf16") for S in SEQS[1:]])
SHAPE = dict(B=PROFILED["B"], H=PROFILED["H"])
WARMUP = 20
GRID_HEADS = (64, 128)
ROUNDS = 4
WORDS = 9  # per block: g_entry, g_exit, c_entry, c_first, c_loop_min, c_loop_max, c_exit, smid, tiles

# Anchors in the solution's kernel (grader.course.solution_source); stamped_source fails loudly if
# one has moved, and tests/modules/m11/test_capstone_timeline.py checks that they are all there.
SIGNATURE = "float* L, int N,\n             float scale) {"
SHARED = "    extern __shared__ __align__(16) unsigned char smem[];\n"
FIRST_TILE = "        __syncthreads();  // tile j is visible to every warp, and every warp has left tile j - 1\n"
LOOP_DONE = "    cp_async_wait_all();  // no copy may outlive the block\n"
KERNEL_END = "    // END SOLUTION\n}"


def _insert_after(source: str, anchor: str, text: str) -> str:
    if source.count(anchor) != 1:
        raise ValueError(f"stamped_source: the anchor {anchor.strip()[:60]!r} is not in the kernel exactly once")
    return source.replace(anchor, anchor + text)


def stamped_source(source: str) -> str:
    """The capstone with ``unsigned long long* stamps`` appended to its parameters and WORDS words
    written per block (linear block index order). ``c_*`` are the SM's cycle counter (clock64),
    ``g_*`` the GPU's nanosecond timer (%globaltimer, which every SM reads alike)."""
    if source.count(SIGNATURE) != 1:
        raise ValueError("stamped_source: the kernel's parameter list has changed")
    s = source.replace(SIGNATURE, "float* L, int N,\n             float scale, unsigned long long* stamps) {")
    s = _insert_after(s, SHARED, "    __shared__ long long loop_end[WARPS];\n    const long long c_entry = clock64();\n"
                      "    unsigned long long g_entry;\n    asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(g_entry));\n"
                      "    long long c_first = 0;\n")
    s = _insert_after(s, FIRST_TILE, "        if (j == 0) c_first = clock64();\n")
    s = _insert_after(s, LOOP_DONE, "    if (lane == 0) loop_end[warp] = clock64();\n")
    end = s.rindex(KERNEL_END)
    return s[:end] + r'''    __syncthreads();  // every warp's output written (its stores issued)
    if (threadIdx.x == 0) {
        const long long c_exit = clock64();
        unsigned long long g_exit;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g_exit));
        unsigned smid;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
        long long lo = loop_end[0], hi = loop_end[0];
        for (int w = 1; w < WARPS; ++w) lo = min(lo, loop_end[w]), hi = max(hi, loop_end[w]);
        const size_t block = blockIdx.x + (size_t)gridDim.x * (blockIdx.y + (size_t)gridDim.y * blockIdx.z);
        unsigned long long* st = stamps + block * ''' + str(WORDS) + r''';
        st[0] = g_entry; st[1] = g_exit; st[2] = c_entry; st[3] = c_first; st[4] = lo; st[5] = hi; st[6] = c_exit;
        st[7] = smid; st[8] = tiles;
    }
''' + s[end:]


def summarise(stamps: np.ndarray) -> dict:
    """One launch's stamps ([blocks, WORDS]) as microseconds: per block (medians) the start (entry to
    the first tile landed in every warp), the loop (to the last warp leaving it) and per tile, the
    end (to every warp's output stores issued); per SM the gap between one block's exit and the next
    block's entry, and the idle time after its last block while others still run (``idle_end``)
    and before its first (``idle_start``). A block's cycles become time at that block's own clock
    (its cycles over its nanoseconds), so its start, loop and end add up to its entry-to-exit time.
    ``shares``: each part's share of the SMs' time (SMs x the first entry to the last exit), with one
    block per SM at a time (``blocks_at_once`` = 1): then they sum to 1."""
    a = stamps.astype(np.int64)
    g_in, g_out, c_in, c_first, _lo, c_hi, c_out, sm, tiles = a.T
    ghz = (c_out - c_in) / np.maximum(g_out - g_in, 1)  # each block's cycles per ns
    us = lambda cycles: cycles / ghz / 1e3  # noqa: E731
    t0, t1 = int(g_in.min()), int(g_out.max())
    span = (t1 - t0) / 1e3
    start, loop, end = us(c_first - c_in), us(c_hi - c_first), us(c_out - c_hi)
    sms = np.unique(sm)
    gaps, idle_end, idle_start, at_once, per_sm = [], [], [], 1, []
    for s in sms:
        i = np.where(sm == s)[0]
        i = i[np.argsort(g_in[i])]
        per_sm.append(len(i))
        idle_start.append((g_in[i[0]] - t0) / 1e3)
        idle_end.append((t1 - g_out[i].max()) / 1e3)
        overlap = g_in[i[1:]] < np.maximum.accumulate(g_out[i])[:-1]
        if overlap.any():
            at_once = 2
        gaps += [(g_in[i[k]] - g_out[i[k - 1]]) / 1e3 for k in range(1, len(i)) if not overlap[k - 1]]
    total = span * len(sms)
    shares = dict(loop=float(loop.sum() / total), start=float(start.sum() / total), end=float(end.sum() / total),
                  between=float(sum(gaps) / total), idle_end=float(sum(idle_end) / total),
                  idle_start=float(sum(idle_start) / total))
    return dict(blocks=int(len(a)), sms=int(len(sms)), blocks_per_sm=[int(min(per_sm)), int(max(per_sm))],
                blocks_at_once=at_once, tiles=int(np.median(tiles)), clock_ghz=round(float(np.median(ghz)), 4),
                span_us=round(span, 2), start_us=round(float(np.median(start)), 3),
                loop_us=round(float(np.median(loop)), 2), tile_us=round(float(np.median(loop / np.maximum(tiles, 1))), 4),
                end_us=round(float(np.median(end)), 3), between_us=round(float(np.median(gaps)), 3) if gaps else None,
                idle_end_us=round(float(np.mean(idle_end)), 2), idle_start_us=round(float(np.mean(idle_start)), 3),
                shares={k: round(v, 5) for k, v in shares.items()})


def blocks_of(stamps: np.ndarray) -> dict:
    """Each block's SM and its entry and exit, microseconds from the launch's first entry (the figure's data)."""
    a = stamps.astype(np.int64)
    t0 = a[:, 0].min()
    return dict(sm=a[:, 7].tolist(), entry_us=((a[:, 0] - t0) / 1e3).round(3).tolist(),
                exit_us=((a[:, 1] - t0) / 1e3).round(3).tolist())


def launch(dtype: str, d: int, causal: bool, S: int, cfg: dict) -> np.ndarray:
    """One warm launch of the stamped kernel with these choices at B=4, H=16, S: its stamps."""
    import cupy

    capstone = CapstoneLaunch(dtype, d, causal, S, cfg, stamped_source)
    grid = capstone.grid
    stamps = cupy.zeros(grid[0] * grid[1] * grid[2] * WORDS, dtype=cupy.uint64)
    for _ in range(WARMUP + 1):
        capstone.run(stamps)
    cupy.cuda.Device().synchronize()
    return cupy.asnumpy(stamps).reshape(-1, WORDS)


def even_heads(heads: int, blocks_per_head: int, sms: int) -> int:
    """The fewest heads, at least ``heads``, whose blocks fill every round of ``sms`` SMs."""
    return next(h for h in range(heads, heads + sms + 1) if h * blocks_per_head % sms == 0)


def grids(dtype: str, d: int, S: int) -> list[dict]:
    """The graded kernel at B = 1 with GRID_HEADS heads and with the even count next to each, beside SDPA flash."""
    import cupy

    import grader
    from grader.capstone import build
    from grader.course import solution_source
    from grader.exercises import m11_capstone as m11

    cfg = m11.tuned_configs(S)[(dtype, d, False)]
    ex_id = build(dtype, d, False, cfg)
    per_head = -(-S // m11.block_rows(cfg))
    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    rows = []
    for heads in GRID_HEADS:
        for h in (heads, even_heads(heads, per_head, sms)):
            report = grader.bench(ex_id, solution_source(ex_id), shape=f"B=1,H={h},S={S}", repeats=ROUNDS)
            flash = next(b for b in report.baselines if b.ran and b.backend == "FLASH_ATTENTION")
            rows.append(dict(dtype=dtype, d=d, causal=False, S=S, B=1, H=h, blocks=h * per_head, sms=sms, choices=cfg,
                             ms=round(report.kernel.ms, 5), repeat_ms=[round(r.median, 5) for r in report.kernel.repeats],
                             flash_ms=round(flash.ms, 5), flash_repeat_ms=[round(r.median, 5) for r in flash.repeats]))
            print(json.dumps(rows[-1]), flush=True)
    return rows


def gpu_main(out: Path):
    import torch

    from grader.exercises import m11_capstone as m11

    runs = []
    for dtype, d, causal, S in RUNS:
        cfg = m11.tuned_configs(S)[(dtype, d, causal)]
        stamps = launch(dtype, d, causal, S, cfg)
        run = dict(dtype=dtype, d=d, causal=causal, S=S, **SHAPE, choices=cfg, summary=summarise(stamps))
        if not runs:
            run["blocks"] = blocks_of(stamps)
        runs.append(run)
        print(json.dumps({k: v for k, v in run.items() if k != "blocks"}), flush=True)
        torch.cuda.empty_cache()
    even = [row for dtype in ("fp16", "bf16") for row in grids(dtype, 128, SEQS[0])]
    device = torch.cuda.get_device_name(0)
    out.mkdir(parents=True, exist_ok=True)
    (out / "capstone_timeline.json").write_text(json.dumps(dict(device=device, runs=runs, grids=even)) + "\n")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["gpu"])
    ap.add_argument("--out", type=Path, default=Path("timeline_out"))
    gpu_main(ap.parse_args().out)

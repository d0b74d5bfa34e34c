"""Where module 09's tuned matmul spends its time: the kernel timed whole, then with one side of its
work taken out, at 4096³ beside cuBLAS.

Each variant is the instructor's `mma_matmul_pipe` (notebooks/09_pipelines) with one edit, at the
tuned build of benchmarks/results/gpu_evidence.json (`mma_matmul_pipe_tuned`):

* ``whole``: unchanged;
* ``memory side``: no `ldmatrix` and no `mma` in the loop: the `cp.async` copies, their waits and the
  barriers alone, the same bytes brought into shared memory in the same order;
* ``compute side``: no refill copies in the loop (the prologue's stay): the `ldmatrix` and `mma` work,
  waits and barriers included, over tiles already in shared memory;
* ``half the B copies``: every B tile only half copied (a third less traffic from L2 in all),
  the rest of the kernel unchanged.

Then two Hopper-only kernels (benchmarks/hopper/, sm_90a, built with nvcc, their tensor maps made by
grader.TensorMap; they predate the course header's TMA and mbarrier, course_hopper.cuh, and are not
exercises), timed in the same run:

* ``memory side through TMA`` (hopper/tma_copy.cu): the memory side's tiles, stages and barriers,
  each step's tiles copied as two TMA boxes issued by one thread;
* ``TMA producer, mma.sync consumers`` (hopper/tma_matmul.cu): the same 64 x 64 warp tiles and
  `ldmatrix` + `mma.sync` loop, fed by a producer warpgroup through TMA, with no block barrier.

Only ``whole`` and the TMA matmul compute the product (both are checked against cuBLAS in fp32),
and the TMA copy checks its last tiles; the others exist to be timed. If the memory side alone takes
nearly as long as the whole kernel, no reordering of the `mma` work can make the kernel much faster:
the copies themselves must get cheaper or fewer. Writes results/matmul_parts.json, read by module
09's reading (make_figures.py: `matmul_parts`).

    python benchmarks/matmul_parts.py gpu        # on a GPU (about 40 s; the Hopper rows need nvcc and an sm_90 GPU)
    python benchmarks/matmul_parts.py compile    # every variant through NVRTC (sm_90, the Hopper kernels sm_90a), no GPU
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

RESULTS = Path(__file__).parent / "results"
HOPPER = Path(__file__).parent / "hopper"
SIZE = 4096
MACROS = ("BM", "BN", "WARPS_M", "WARPS_N", "BK", "STAGES")

MMA = "mma_m16n8k16_f16(acc[i][j], a[kk % 2][i], &b[kk % 2][j / 2][j % 2 * 2], acc[i][j]);"
NEXT_SLICE = "load_fragments(a[(kk + 1) % 2], b[(kk + 1) % 2], As, kk + 1);"
NEXT_STEP = "load_fragments(a[(kk + 1) % 2], b[(kk + 1) % 2], stages + (s + 1) % STAGES * STAGE, 0);"
REFILL = "if (s + STAGES - 1 < steps) copier.copy("
B_LOOP = "for (int i = 0; i < B_CHUNKS; ++i) {\n            const bool inside = b_cols_inside"

# (name, what it keeps, [(text in the solution, its replacement)])
VARIANTS = (
    ("whole", "the kernel as the solution writes it", []),
    ("memory side", "copies, waits and barriers; no ldmatrix, no mma", [(MMA, "{}"), (NEXT_SLICE, "{}"), (NEXT_STEP, "{}")]),
    ("compute side", "ldmatrix, mma, waits and barriers; no copies after the prologue",
     [(REFILL, "if (false) copier.copy(")]),
    ("half the B copies", "the whole kernel, each B tile half copied",
     [(B_LOOP, B_LOOP.replace("i < B_CHUNKS", "i < B_CHUNKS / 2"))]),
)


def variant_sources() -> dict[str, str]:
    """Each variant's source, from the solution; fails loudly when an edit no longer applies (the
    solution changed under this benchmark)."""
    from grader.course import solution_source
    from grader.wrong_corpus import replace_each_once

    solution = solution_source("mma_matmul_pipe")
    out = {}
    for name, _, edits in VARIANTS:
        out[name] = replace_each_once(solution, edits, f"matmul_parts variant {name!r}")
    return out


# (name, what it keeps, file, kernel, block threads)
HOPPER_KERNELS = (
    ("memory side through TMA", "the memory side's tiles and barriers, each step's tiles as two TMA copies from one thread",
     "tma_copy.cu", "tma_copy", 256),
    ("TMA producer, mma.sync consumers", "the same mma.sync loop in 8 warps, fed by TMA from a producer warpgroup",
     "tma_matmul.cu", "tma_matmul", 384),
)
HOPPER_STAGES = 4
HOPPER_BM, HOPPER_BN, HOPPER_BK = 128, 256, 32  # the tile both Hopper kernels #define (the tuned build's)


def hopper_source(file: str) -> str:
    """A Hopper kernel's translation unit: the course prelude (ldmatrix, mma), then the kernel."""
    from grader.source import translation_unit

    return translation_unit((HOPPER / file).read_text())


def tuned_build() -> dict[str, int]:
    """The tuned configuration recorded in the evidence (the benchmark's `mma_matmul_pipe_tuned`)."""
    bench = json.loads((RESULTS / "gpu_evidence.json").read_text())["bench"]
    tuned = next(r for r in bench if r["kernel"] == "mma_matmul_pipe_tuned")
    return {k: int(tuned[k]) for k in MACROS}


def options(cfg: dict[str, int]) -> tuple[str, ...]:
    return tuple(f"-D{k}={v}" for k, v in cfg.items())


def compile_main() -> None:
    from grader.nvrtc import compile_check

    cfg = tuned_build()
    for name, src in variant_sources().items():
        compile_check(src, options=options(cfg), archs=("sm_90",))
        print(f"{name}: compiles for sm_90 with {' '.join(options(cfg))}")
    for name, _, file, _, _ in HOPPER_KERNELS:
        compile_check((HOPPER / file).read_text(), options=(f"-I{HOPPER}", f"-DSTAGES={HOPPER_STAGES}"), archs=("sm_90a",))
        print(f"{name}: compiles for sm_90a")


def hopper_launches(a, b, c, want) -> dict:
    """The Hopper kernels built with nvcc for sm_90a and checked, as launches to time; {} (and why,
    printed) where there is no nvcc or the GPU is not a Hopper."""
    import shutil
    import subprocess
    import tempfile

    import cupy

    from grader.source import INCLUDE_DIR

    if cupy.cuda.Device().compute_capability != "90" or shutil.which("nvcc") is None:
        print("matmul_parts: the Hopper rows need an sm_90 GPU and nvcc; skipped", flush=True)
        return {}
    size = a.shape[0]
    bm, bn, bk = HOPPER_BM, HOPPER_BN, HOPPER_BK
    from grader import TensorMap

    def pair(box_a, box_b, swizzle_a, swizzle_b) -> bytes:  # both maps, one after the other
        return b"".join(TensorMap(x, box, sw).gpu_bytes().get().tobytes()
                        for x, box, sw in ((a, box_a, swizzle_a), (b, box_b, swizzle_b)))

    # tma_copy: dense boxes; tma_matmul: A with the 64-byte swizzle, B as 64-column boxes with the 128-byte one
    maps = {"tma_copy": pair((bk, bm), (bn, bk), 0, 0), "tma_matmul": pair((bk, bm), (64, bk), 64, 128)}
    launches = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, _, file, kernel, threads in HOPPER_KERNELS:
            tu, cubin = Path(tmp, file), Path(tmp, f"{kernel}.cubin")
            tu.write_text(hopper_source(file))
            subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", "-O3", f"-I{INCLUDE_DIR}", f"-I{HOPPER}",
                            f"-DSTAGES={HOPPER_STAGES}", "-o", str(cubin), str(tu)], check=True)
            fn = cupy.RawModule(path=str(cubin)).get_function(kernel)
            smem = HOPPER_STAGES * (bm * bk + bk * bn) * 2 + 1024  # + the 1024-byte alignment the swizzle needs
            fn.max_dynamic_shared_size_bytes = smem
            map_bytes = cupy.asarray(np.frombuffer(maps[kernel], np.uint8))
            grid, block = (size // bn, size // bm), (threads,)
            dims = (np.int32(size), np.int32(size), np.int32(size))
            if kernel == "tma_copy":
                counts = cupy.zeros(grid[0] * grid[1] + 1, cupy.float32)
                args = (map_bytes, a, b, counts, *dims)
            else:
                args = (map_bytes, c, *dims)
            launch = (lambda fn=fn, grid=grid, block=block, args=args, smem=smem:
                      fn(grid, block, args, shared_mem=smem))
            if kernel == "tma_matmul":
                c.fill(np.nan)
            launch()
            cupy.cuda.Device().synchronize()
            if kernel == "tma_copy" and float(counts[-1]):
                raise SystemExit(f"matmul_parts: {name} left {float(counts[-1]):.0f} tile elements unlike global memory")
            if kernel == "tma_matmul":
                err = float(cupy.abs(c - want).max() / cupy.abs(want).max())
                if not err <= 1e-3:
                    raise SystemExit(f"matmul_parts: {name}'s product is off by {err:.3g} (relative to its largest entry)")
            launches[name] = launch
    return launches


def gpu_main(out: Path, repeats: int = 3) -> None:
    import cupy

    import grader
    from grader.benchmark import Budget, EventTimer
    from grader.exercises.m09_pipelines import gemm_shared_bytes

    cfg = tuned_build()
    name = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    rng = np.random.default_rng(0)
    a = cupy.asarray(rng.standard_normal((SIZE, SIZE)).astype(np.float16))
    b = cupy.asarray(rng.standard_normal((SIZE, SIZE)).astype(np.float16))
    c = cupy.empty((SIZE, SIZE), cupy.float32)
    smem = gemm_shared_bytes(cfg["STAGES"], cfg["BM"], cfg["BN"], cfg["BK"])
    grid, block = (SIZE // cfg["BN"], SIZE // cfg["BM"]), (32 * cfg["WARPS_M"] * cfg["WARPS_N"],)
    args = (a, b, c, np.int32(SIZE), np.int32(SIZE), np.int32(SIZE))
    launches = {}
    for vname, src in variant_sources().items():
        k = grader.RawKernel(src, "mma_matmul_pipe", options=options(cfg))
        k.max_dynamic_shared_size_bytes = smem
        launches[vname] = lambda k=k: k(grid, block, args, shared_mem=smem)
    launches["whole"]()
    want = cupy.matmul(a.astype(cupy.float32), b.astype(cupy.float32))
    err = float(cupy.abs(c - want).max() / cupy.abs(want).max())
    if err > 1e-3:
        raise SystemExit(f"matmul_parts: the whole kernel's product is off by {err:.3g} (relative to its largest entry)")
    launches.update(hopper_launches(a, b, c, want))
    launches["cuBLAS"] = lambda: cupy.matmul(a, b)

    timer, budget = EventTimer(), Budget(min_runs=20, min_ms=300.0, max_ms=3000.0)
    stream = cupy.cuda.Stream(non_blocking=True)
    times = {k: [] for k in launches}
    for _ in range(repeats):  # interleaved, so that a clock change hits every variant alike
        for k, fn in launches.items():
            with stream:
                times[k].append(budget.measure(timer, fn, stream).median)
    flops = 2.0 * SIZE ** 3
    l2_bytes = SIZE ** 3 * 2 * (1 / cfg["BN"] + 1 / cfg["BM"])  # A read once per block column, B per block row
    rows = []
    kept = [(v[0], v[1]) for v in VARIANTS] + [(h[0], h[1]) for h in HOPPER_KERNELS if h[0] in launches]
    for vname, keeps in (*kept, ("cuBLAS", "cupy.matmul, fp16 in and out")):
        ms = float(np.median(times[vname]))
        row = dict(variant=vname, keeps=keeps, ms=round(ms, 4), tflops_equivalent=round(flops / ms / 1e9, 1),
                   repeat_ms=[round(t, 4) for t in times[vname]])
        if vname.startswith("memory side"):
            row["l2_to_shared_tb_per_s"] = round(l2_bytes / ms / 1e9, 2)
        rows.append(row)
        print(row, flush=True)
    out.write_text(json.dumps(dict(device=name, size=SIZE, build=cfg, relative_error_whole=err,
                                   l2_to_shared_bytes=l2_bytes, rows=rows), indent=1) + "\n")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["gpu", "compile"])
    ap.add_argument("--out", type=Path, default=RESULTS / "matmul_parts.json")
    ns = ap.parse_args()
    gpu_main(ns.out) if ns.mode == "gpu" else compile_main()

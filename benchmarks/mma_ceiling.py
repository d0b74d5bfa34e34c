"""The ceiling of the course's tensor-core instruction on this GPU: how many TFLOP/s
`mma.sync.m16n8k16` (fp16 or bf16 in, fp32 accumulate; `mma_m16n8k16_f16` of the course header)
can deliver when nothing else runs, no memory traffic, no softmax, only independent mma chains.

Every kernel of modules 08-09 is built on this instruction, so its ceiling bounds them; cuBLAS and
SDPA's cuDNN backend use Hopper's `wgmma` instead. The numbers go to
results/mma_ceiling.json (one set of rows per GPU model), read by the readings of modules 09 and 11.

    python benchmarks/mma_ceiling.py gpu      # on a GPU
    python benchmarks/mma_ceiling.py emulator # the kernel's result checked on the emulator (tiny launch)
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import grader  # noqa: E402

CHAINS = 8  # independent accumulators per warp: enough to cover the mma latency
SOURCE = r"""
#ifndef ITERS
#define ITERS 4096
#endif
extern "C" __global__ void mma_ceiling(float* out, unsigned seed) {
    // Operands from the thread index and a runtime seed, so nothing is constant-folded; the sum
    // of the accumulators is written so that nothing is dead code.
    const unsigned x = threadIdx.x * 2654435761u + seed;
    const unsigned a[4] = {x & 0x3c003c00u, (x >> 1) & 0x3c003c00u, (x >> 2) & 0x3c003c00u, (x >> 3) & 0x3c003c00u};
    const unsigned b[2] = {(x >> 4) & 0x3c003c00u, (x >> 5) & 0x3c003c00u};
    float acc[CHAINS][4] = {};
    for (int i = 0; i < ITERS; ++i)
        for (int c = 0; c < CHAINS; ++c) MMA(acc[c], a, b, acc[c]);
    float s = 0.0f;
    for (int c = 0; c < CHAINS; ++c) s += acc[c][0] + acc[c][1] + acc[c][2] + acc[c][3];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
""".replace("CHAINS", str(CHAINS))


def kernel(dtype, iters):
    mma = "mma_m16n8k16_bf16" if dtype == "bf16" else "mma_m16n8k16_f16"
    return grader.RawKernel(SOURCE, "mma_ceiling", options=(f"-DMMA={mma}", f"-DITERS={iters}"))


def gpu_main(out: Path):
    import cupy

    from grader.benchmark import Budget, EventTimer

    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    name = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    timer, budget = EventTimer(), Budget(min_runs=10, min_ms=200.0, max_ms=2000.0)
    stream = cupy.cuda.Stream(non_blocking=True)
    rows = []
    for dtype in ("fp16", "bf16"):
        for warps_per_sm in (4, 8, 16, 32):
            iters = 4096
            k = kernel(dtype, iters)
            blocks, threads = sms * warps_per_sm // 4, 128
            buf = cupy.empty(blocks * threads, cupy.float32)
            with stream:
                ms = budget.measure(timer, lambda: k((blocks,), (threads,), (buf, np.uint32(1))), stream).median
            flops = 2.0 * 16 * 8 * 16 * CHAINS * iters * blocks * threads / 32
            rows.append(dict(dtype=dtype, warps_per_sm=warps_per_sm, ms=round(ms, 4), tflops=round(flops / ms / 1e9, 1),
                             device=name))
            print(rows[-1], flush=True)
    # rows of other GPU models stay: each reading takes the ceiling of the GPU its own records come from
    kept = [r for r in json.loads(out.read_text()) if r.get("device") != name] if out.exists() else []
    out.write_text(json.dumps(kept + rows, indent=1) + "\n")


def emulator_main():
    """One warp, a few iterations: the kernel runs and sums what the mma computed (1 * 1 products)."""
    k = kernel("fp16", 2)
    buf = grader.to_device(np.zeros(32, np.float32))
    k((1,), (32,), (buf, np.uint32(0)))
    got = grader.to_host(buf)
    assert np.isfinite(got).all(), got
    print("mma_ceiling runs on the emulator; per-lane sums:", got[:4])


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["emulator", "gpu"])
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "mma_ceiling.json")
    a = ap.parse_args()
    gpu_main(a.out) if a.mode == "gpu" else emulator_main()

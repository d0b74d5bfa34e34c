"""The tensor-core flash forward (benchmarks/kernels/tc_flash_fwd.cu): checked against the float64
reference, then timed. On the emulator: the launch time the primitives issue asks for (S=1024,
d=64, one head). On a GPU: B=4, H=16, S=4096 beside SDPA's flash backend, as `bench` records.

    python benchmarks/tc_flash.py emulator
    python benchmarks/tc_flash.py gpu --out results.json
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import grader  # noqa: E402
from grader import reference as ref  # noqa: E402

SOURCE = (Path(__file__).parent / "kernels" / "tc_flash_fwd.cu").read_text()
TILE = 64


def options(d: int, causal: bool) -> tuple:
    return (f"-DHEAD_DIM={d}", f"-DCAUSAL={int(causal)}")


def shared_bytes(d: int) -> int:
    return 3 * TILE * (d + 8) * 2


def inputs(B, H, S, d, seed, bf16):
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((B, H, S, d)).astype(np.float32) for _ in range(3))
    if bf16:
        # bfloat16 bits: the top half of a float, rounded to nearest even
        def to_bf16(x):
            b = x.view(np.uint32)
            return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)
        return [to_bf16(x) for x in (q, k, v)]
    return [x.astype(np.float16) for x in (q, k, v)]


def as_float(x, bf16):
    return (x.astype(np.uint32) << 16).view(np.float32) if bf16 else x.astype(np.float32)


def check(B, H, S, d, causal, bf16, seed=0):
    """Run once (emulator or GPU, whichever grader uses) and compare with float64 attention."""
    q, k, v = inputs(B, H, S, d, seed, bf16)
    o = np.zeros_like(q)
    lse = np.zeros((B, H, S), np.float32)
    scale = 1.0 / math.sqrt(d)
    kern = grader.RawKernel(SOURCE, f"tc_flash_fwd_{'bf16' if bf16 else 'f16'}", options=options(d, causal))
    kern.max_dynamic_shared_size_bytes = shared_bytes(d)
    dq, dk, dv, do, dl = (grader.to_device(x) for x in (q, k, v, o, lse))
    start = time.perf_counter()
    kern((math.ceil(S / TILE), H, B), (128,), (dq, dk, dv, do, dl, np.int32(S), np.float32(scale)),
         shared_mem=shared_bytes(d))
    seconds = time.perf_counter() - start
    got_o, got_l = as_float(grader.to_host(do), bf16), grader.to_host(dl)
    want_o, want_l = ref.attention_forward(*(as_float(x, bf16) for x in (q, k, v)), scale=scale, causal=causal)
    err_o = float(np.max(np.abs(got_o - want_o)))
    err_l = float(np.max(np.abs(got_l - want_l)))
    return seconds, err_o, err_l


def emulator_main():
    for S, d, causal in [(1024, 64, False), (100, 64, True), (129, 128, False)]:
        for bf16 in (False, True):
            check(1, 1, S, d, causal, bf16)  # compile and warm the worker
            secs, eo, el = check(1, 1, S, d, causal, bf16, seed=1)
            print(f"S={S} d={d} causal={causal} {'bf16' if bf16 else 'fp16'}: {secs * 1e3:.0f} ms per launch, "
                  f"max |O - ref| {eo:.2e}, max |L - ref| {el:.2e}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["emulator"])
    ap.parse_args()
    emulator_main()

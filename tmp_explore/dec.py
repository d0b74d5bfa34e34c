import sys, math, numpy as np, cupy as cp
sys.path.insert(0, '.'); sys.path.insert(0, 'benchmarks')
import grader
from grader import benchmark
from grader.course import solution_source
from grader.exercises.m10_decoding import choose_splits, decode_bytes
import decode as D
timer, budget = benchmark.EventTimer(), benchmark.Budget(min_runs=20, min_ms=150.0, max_ms=1500.0)
stream = cp.cuda.Stream(non_blocking=True)
base = solution_source('decode_split_d128').replace('#define UNROLL 4 ', '#ifndef UNROLL\n#define UNROLL 4\n#endif\n//').replace('#define QG 4 ', '#ifndef QG\n#define QG 4\n#endif\n//')
assert '#ifndef UNROLL' in base and '#ifndef QG' in base
for d, (B, H, nq, N) in [(128, (16, 8, 4, 32768)), (64, (1, 32, 1, 131072)), (128, (1, 32, 1, 131072)), (128, (8, 32, 1, 32768))]:
    q = cp.random.standard_normal((B, H, nq, d), dtype=cp.float32).astype(cp.float16)
    k = cp.random.standard_normal((B, H, N, d), dtype=cp.float32).astype(cp.float16)
    v = cp.random.standard_normal((B, H, N, d), dtype=cp.float32).astype(cp.float16)
    lengths = cp.full((B,), N, cp.int32)
    nbytes = decode_bytes(B, H, nq, N, d)
    merge = grader.RawKernel(solution_source(f'decode_merge_d{d}'), 'decode_merge', options=(f'-DHEAD_DIM={d}',)).compile()
    for unroll in (4, 8):
        for lb in ('', '__launch_bounds__(128, 4) '):
            src = base.replace('extern "C" __global__ void decode_split(', f'extern "C" __global__ void {lb}decode_split(')
            split = grader.RawKernel(src, 'decode_split', options=(f'-DHEAD_DIM={d}', f'-DUNROLL={unroll}')).compile()
            for bps in (8, 16, 32):
                splits = choose_splits(B, H, N, blocks_per_sm=bps)
                with stream:
                    run, O, L = D.launcher(split, merge, q, k, v, lengths, splits)
                    run()
                stream.synchronize()
                ms = budget.measure(timer, run, stream).median
                print(f'd={d} B={B} H={H} nq={nq} N={N} unroll={unroll} lb={"y" if lb else "n"} splits={splits}: {ms:.4f} ms {nbytes/ms/1e6:.0f} GB/s {nbytes/ms/1e6/3350:.0%} regs {split._kernel.num_regs if hasattr(split, "_kernel") else "?"}', flush=True)

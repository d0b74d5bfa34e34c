"""What issuing a thread's loads together is worth: module 08's tc_flash_fwd with its tile copy as
the notebook has it (every load of a thread first, then the stores) against the same kernel with
the copy loop that walks the tile in steps of blockDim.x (a trip count unknown at compile time, so
each load's 16 bytes arrive before the next load is issued). Nothing else differs.

    PYTHONPATH=. GRADER_BACKEND=gpu python3 benchmarks/bench_08_loads.py OUT.json

Each build is checked on its grading cases first, then timed at B=4, H=16, S=4096 in the eight
configurations (fp16/bf16 x d 64/128 x causal or not). Writes OUT.json:
{"device", "records": [{exercise, dtype, d, causal, copy, ms, tflops}]}.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from grader.course import solution_source  # noqa: E402

from bench_08_tensor_cores import FLASH, flash_exercise  # noqa: E402
from timed_variants import Timings  # noqa: E402

ONE_AT_A_TIME = '''__device__ __forceinline__ void load_tile(elem* dst, const elem* src, int row0, int N) {
    for (int c = threadIdx.x; c < TILE * HEAD_DIM / 8; c += blockDim.x) {
        const int r = c / (HEAD_DIM / 8), col = c % (HEAD_DIM / 8) * 8;
        int4 v = make_int4(0, 0, 0, 0);
        if (row0 + r < N) v = *reinterpret_cast<const int4*>(src + (size_t)(row0 + r) * HEAD_DIM + col);
        *reinterpret_cast<int4*>(dst + r * STRIDE + col) = v;
    }
}
'''


def one_at_a_time(source: str) -> str:
    """The notebook's kernel with its load_tile replaced by the blockDim.x-strided loop."""
    start = source.index("__device__ __forceinline__ void load_tile(")
    end = source.index("\n}\n", start) + 3
    return source[:start] + ONE_AT_A_TIME + source[end:]


def main(out: str) -> list:
    timings = Timings()
    for dtype, d, causal in FLASH:
        ex = flash_exercise(dtype, d, causal)
        for copy, source in (("all loads, then the stores (notebook)", solution_source(ex)),
                             ("one load at a time (blockDim.x loop)", one_at_a_time(solution_source(ex)))):
            timings.add(ex, source, dtype, dict(exercise=ex, dtype=dtype, d=d, causal=causal, copy=copy))
    return timings.write(out)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    main(sys.argv[1])

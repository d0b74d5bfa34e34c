"""What the one-change benchmarks (bench_08_loads.py, bench_09_edge.py) share: each variant of a
notebook's kernel is checked on its exercise's grading cases before it is timed, and the records
go to one JSON file with the device they ran on."""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from grader.benchmark import bench  # noqa: E402
from grader.checks import run_check  # noqa: E402


class Timings:
    def __init__(self):
        self.records, self.device = [], None

    def add(self, ex_id: str, source: str, dtype: str, fields: dict) -> dict:
        """Check ``source`` as exercise ``ex_id`` (hidden cases included), time it at the benchmark
        shape without baselines, and keep ``fields`` with its time and TFLOP/s."""
        result = run_check(ex_id, source, include_hidden=True, seed=1)
        if not result.passed:
            raise SystemExit(f"{ex_id} ({fields}): {result.first_failure.message}")
        rec = bench(ex_id, source, dtype=dtype, repeats=3, baselines=False).record()
        self.device = rec["device"]
        self.records.append(dict(fields, ms=rec["ms"], tflops=rec["tflops"]))
        print(json.dumps(self.records[-1]), flush=True)
        return self.records[-1]

    def write(self, out: str) -> list:
        Path(out).write_text(json.dumps({"device": self.device, "records": self.records}, indent=1) + "\n")
        return self.records

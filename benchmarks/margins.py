"""tests/checks/test_correct_kernels.py over many seeds, spread across processes by seed rather than by
kernel, so a few slow kernels (the tensor-core builds on the emulator) still finish in one run:
process i runs SEEDS consecutive seeds of the run's one seed sequence, and the worst ratio of each
(kernel, output) over all of them is the run's record.

    python benchmarks/margins.py --seeds 200 --procs 16 -k "tc_flash or capstone" --out run.jsonl
    python benchmarks/margins.py --merge run.jsonl        # into results/margins.json, with --note TEXT
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "margins.json"
STEP = 1000003  # the test's seed step: seed s of a run from BASE is BASE + STEP * s


def run(seeds: int, procs: int, keyword: str, base: int, backend: str, out: Path, deadline: float) -> list[dict]:
    per = -(-seeds // procs)
    parts = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(procs):
            part = Path(tmp) / f"{i}.jsonl"
            env = os.environ | dict(GRADER_MARGIN_SEEDS=str(per), GRADER_MARGIN_BASE=str((base + STEP * per * i) % 2**31),
                                    GRADER_MARGIN_OUT=str(part), GRADER_MARGIN_BACKEND=backend,
                                    GRADER_BACKEND=backend)
            cmd = [sys.executable, "-m", "pytest", "tests/checks/test_correct_kernels.py", "-q", "-p", "no:cacheprovider",
                   "-o", "addopts=", "-W", "ignore", "-k", keyword]
            log = open(Path(tmp) / f"{i}.log", "w")
            parts.append((part, subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)))
        stop = time.time() + deadline if deadline else float("inf")
        while time.time() < stop and any(p.poll() is None for _, p in parts):
            time.sleep(2)
        for _, p in parts:
            if p.poll() is None:
                p.terminate()
        failed = [i for i, (_, p) in enumerate(parts) if p.wait() != 0]
        if failed:
            print(f"process {failed[0]}'s output ends:\n" + (Path(tmp) / f"{failed[0]}.log").read_text()[-3000:])
        worst: dict[tuple, dict] = {}
        for part, _ in parts:
            for line in part.read_text().splitlines() if part.exists() else []:
                r = json.loads(line)
                key = (r["exercise"], r["kernel"], r["output"])
                w = worst.setdefault(key, r | dict(seeds=0, base=base))
                w["seeds"] += r["seeds"]
                if r["worst"] >= w["worst"]:
                    w.update(worst=r["worst"], case=r["case"], seed=r["seed"])
    records = list(worst.values())  # a kernel that some processes did not finish has fewer seeds
    out.write_text("".join(json.dumps(r) + "\n" for r in records))
    print(f"{len(records)} records of {per * procs} seeds each or fewer "
          f"({', '.join(sorted({r['exercise'] for r in records if r['seeds'] < per * procs})) or 'none fewer'}); "
          f"processes that failed or were stopped: {failed or 'none'}")
    for r in sorted(records, key=lambda r: -r["worst"])[:10]:
        print(f"  {r['exercise']} {r['kernel']} {r['output']}: {r['worst']:.3g} ({r['case']}, seed {r['seed']})")
    return records


def merge(path: Path, note: str | None):
    data = json.loads(RESULTS.read_text())
    data["records"] += [json.loads(line) for line in path.read_text().splitlines()]
    if note:
        data["note"] += " " + note
    RESULTS.write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--procs", type=int, default=os.cpu_count())
    ap.add_argument("-k", dest="keyword", default="", help="pytest -k expression over 'exercise/kernel' ids")
    ap.add_argument("--base", type=int, default=int(os.environ.get("GRADER_MARGIN_BASE", "31337")))
    ap.add_argument("--backend", default="cpu", choices=["cpu", "gpu"])
    ap.add_argument("--out", type=Path, default=Path("margins_run.jsonl"))
    ap.add_argument("--deadline", type=float, help="stop the processes after this many seconds and keep what finished")
    ap.add_argument("--merge", type=Path, help="append this run's records to results/margins.json")
    ap.add_argument("--note", help="with --merge: a sentence for the file's note")
    a = ap.parse_args()
    if a.merge:
        merge(a.merge, a.note)
    else:
        run(a.seeds, a.procs, a.keyword, a.base, a.backend, a.out, a.deadline)

"""Throughput of ``python -m grader autograde`` on a synthetic class (a benchmark, not a test).

    python benchmarks/autograde_bench.py --students 30 --workers 1 2          # 210 submissions, 00-06
    python benchmarks/autograde_bench.py --students 30 --workers 1 4 8 16     # on a 16-core machine
    python benchmarks/autograde_bench.py ... --scheduler tcp://host:8786      # a Dask cluster
    python benchmarks/autograde_bench.py ... --limit 20                       # only the first N per module

The class: ``--students`` students, each handing in every module 00-06 (so students x 7
submissions). Student k's notebooks are, by k mod 6: the full solutions; the release
untouched; solutions with wrong kernels from ``tests/wrong/`` in place of every kernel that has
one; solutions whose first kernel never ends; solutions whose first kernel aborts; the full
solutions again. All modules are graded in one call (one pool, as ``python -m grader autograde
MOD1 MOD2 ...`` does). Prints submissions per minute and checks per minute for each worker count
and writes a JSON record (``--json``). Each run builds its own sandbox runtime (a fresh folder
per run, never reused), inside its time: ``seconds_checks`` of the record excludes it.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader.autograde import autograde  # noqa: E402
from grader.autograde.notebook import split_magic  # noqa: E402
from grader.autograde.sandbox import Limits  # noqa: E402
from grader.classroom import answer_cells, fill_answers, read_nb, write_nb  # noqa: E402
from grader.course import modules as course_modules  # noqa: E402
from grader.wrong_corpus import WRONG, wrong_kernels  # noqa: E402

KINDS = ["correct", "blank", "wrong", "hanging", "crashing", "correct"]


def _replace_body(cell: str, body: str) -> str:
    name, opts, src = split_magic(cell)
    head = src.split("{", 1)[0]
    return f"%%cuda {name}\n{head}{{\n{body}\n}}\n"


def make_class(course: Path, students: int, modules: list[str]) -> dict:
    counts = {}
    for m in modules:
        for rel in sorted((ROOT / "exercises" / m).glob("*.ipynb")):
            released = read_nb(rel)
            sol = answer_cells(read_nb(ROOT / "solutions" / m / rel.name))
            for k in range(students):
                kind = KINDS[k % len(KINDS)]
                answers = dict(sol)
                cuda = [g for g, s in sol.items() if s.lstrip().startswith("%%cuda")]
                if kind == "blank":
                    nb = released
                else:
                    if kind == "wrong":
                        for g in cuda:
                            kernel = split_magic(sol[g])[0]
                            wrong = wrong_kernels(kernel) if (WRONG / kernel).is_dir() else []
                            if wrong:
                                pick = wrong[k % len(wrong)].source()
                                answers[g] = f"%%cuda {kernel}\n" + re.sub(r"^// expect:.*\n", "", pick)
                    elif kind == "hanging" and cuda:
                        answers[cuda[0]] = _replace_body(sol[cuda[0]], "    while (true) { }")
                    elif kind == "crashing" and cuda:
                        answers[cuda[0]] = "%%cuda " + split_magic(sol[cuda[0]])[0] + "\n#include <stdlib.h>\n" + \
                            _replace_body(sol[cuda[0]], "    abort();").split("\n", 1)[1]
                    nb = fill_answers(released, answers)
                write_nb(nb, course / "grading" / "submitted" / f"s{k:03d}" / m / rel.name)
                counts[kind] = counts.get(kind, 0) + 1
    return counts


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--students", type=int, default=30)
    ap.add_argument("--modules", nargs="*")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--scheduler")
    ap.add_argument("--limit", type=int, help="grade only the first N students (a quick sample)")
    ap.add_argument("--launch-limit", type=float, default=5.0)
    ap.add_argument("--json")
    a = ap.parse_args()
    modules = a.modules or [m for m in course_modules(ROOT) if m[:2] <= "06"]
    course = Path(tempfile.mkdtemp(prefix="fa-autograde-bench-"))
    for m in modules:
        shutil.copytree(ROOT / "exercises" / m, course / "exercises" / m)
        shutil.copytree(ROOT / "notebooks" / m, course / "notebooks" / m)
    shutil.copytree(ROOT / "grader", course / "grader", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (course / "grading").mkdir()
    counts = make_class(course, a.students, modules)
    students = [f"s{k:03d}" for k in range(a.limit if a.limit else a.students)]
    n_sub = len(students) * len(modules)
    print(f"class: {a.students} students x {len(modules)} modules = {a.students * len(modules)} submissions "
          f"({counts}); timing {n_sub} of them; course in {course}", flush=True)
    limits = Limits(wall_s=60, launch_s=a.launch_limit, cpu_s=120)
    records = []
    runs = [("scheduler", a.scheduler)] if a.scheduler else [("workers", w) for w in a.workers]
    for kind, value in runs:
        t0 = time.monotonic()
        outs = autograde(modules, root=course, seed=12345, limits=limits, students=students, quiet=True,
                         write_notebooks=False, **({"scheduler": value} if kind == "scheduler" else {"workers": value}))
        checks = sum(out["checks"] for out in outs.values())
        dt = time.monotonic() - t0
        first = next(iter(outs.values()))
        pool_s = first["seconds_checks"]  # the checks alone; the rest is reading and the gradebook
        job_s = first["pool_job_seconds"]  # summed over checks: grows with the workers if the machine slows them
        rec = {kind: value, "submissions": n_sub, "checks": checks, "seconds": round(dt, 1), "seconds_checks": round(pool_s, 1),
               "mean_check_s": round(job_s / checks, 2),
               **({"busy": round(job_s / (value * pool_s), 3)} if kind == "workers" else {}),
               "submissions_per_min": round(n_sub / dt * 60, 2), "checks_per_min": round(checks / dt * 60, 2)}
        records.append(rec)
        print(json.dumps(rec), flush=True)
    if len(records) > 1 and "workers" in records[0]:
        base = records[0]["submissions_per_min"] / records[0]["workers"]
        for r in records:
            r["parallel_efficiency"] = round(r["submissions_per_min"] / (base * r["workers"]), 3)
            print(f"{r['workers']:>3} worker(s): {r['submissions_per_min']:7.2f} submissions/min, "
                  f"efficiency {r['parallel_efficiency']:.0%}")
    if a.json:
        Path(a.json).write_text(json.dumps({"machine": platform.node(), "cpus": os.cpu_count(),
                                            "records": records}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

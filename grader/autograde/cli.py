"""Command line of ``python -m grader autograde``."""
from __future__ import annotations

import argparse
import signal
import sys

NOT_GRADED_EXIT = 3  # some checks did not run: their old scores were kept (rerun with --resume)
INTERRUPTED_EXIT = 130


def _workers(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more (got {n})")
    return n


def _stop(signum, frame):
    raise KeyboardInterrupt  # SIGTERM stops the run as Ctrl-C does


def main(argv=None) -> int:
    from . import autograde
    from .sandbox import WALL_CAP_FACTOR, Limits

    p = argparse.ArgumentParser(prog="python -m grader autograde",
                                description="grade the submissions of one or more modules in clean, sandboxed processes and write "
                                            "the scores into the nbgrader gradebook")
    p.add_argument("module", nargs="+", help="assignment id(s), e.g. 00_launching_kernels; several share one pool "
                                              "of workers")
    p.add_argument("--submissions", default="grading/submitted", help="default: grading/submitted")
    p.add_argument("--student", action="append", help="grade only this student (repeatable)")
    p.add_argument("--workers", type=_workers, help="checks at once on this machine (default: one per core)")
    p.add_argument("--scheduler", help="Dask scheduler address, e.g. tcp://host:8786 (pip install dask distributed)")
    p.add_argument("--seed", type=int, help="run seed (default: GRADER_SEED, else fresh; saved in report.json)")
    p.add_argument("--backend", choices=["cpu", "gpu"], default="cpu", help="cpu: the emulator (default)")
    p.add_argument("--db", help="gradebook URL or path (default: grading/gradebook.db)")
    p.add_argument("--time-limit", type=float, default=120.0, help="CPU seconds per check (default 120; the wall-clock "
                                                                    f"cap is {WALL_CAP_FACTOR} times that)")
    p.add_argument("--launch-limit", type=float, default=20.0, help="CPU seconds per kernel launch (default 20)")
    p.add_argument("--memory", type=float, default=8.0, help="GiB of address space per check (default 8)")
    p.add_argument("--fixed-shapes", action="store_true", help="hidden cases keep their declared shapes")
    p.add_argument("--grader-ref", help="copy grader/ from this git commit instead of the working tree")
    p.add_argument("--resume", action="store_true", help="after a run with checks NOT GRADED: its seed, its finished "
                                                          "checks kept, only the rest run")
    p.add_argument("--no-notebooks", action="store_true", help="do not write grading/autograded notebooks")
    p.add_argument("--quiet", action="store_true")
    a = p.parse_args(argv)
    limits = Limits(cpu_s=a.time_limit, launch_s=a.launch_limit, address_space=int(a.memory * (1 << 30)))
    signal.signal(signal.SIGTERM, _stop)
    try:
        out = autograde(a.module[0] if len(a.module) == 1 else a.module, submissions=a.submissions,
                        workers=a.workers, scheduler=a.scheduler, seed=a.seed, limits=limits, backend=a.backend,
                        draw_shapes=not a.fixed_shapes, grader_ref=a.grader_ref, db=a.db, students=a.student,
                        write_notebooks=not a.no_notebooks, resume=a.resume, quiet=a.quiet)
    except KeyboardInterrupt:
        print("autograde: interrupted; its sandboxes were killed and nothing was written", file=sys.stderr)
        return INTERRUPTED_EXIT
    outs = [out] if len(a.module) == 1 else list(out.values())
    missing = sum(o["not_graded"] for o in outs)
    if missing:
        print(f"autograde: {missing} cell(s) NOT GRADED (their checks did not run; old scores kept): "
              "run again with --resume to grade only those", file=sys.stderr)
        return NOT_GRADED_EXIT
    return 0


if __name__ == "__main__":
    sys.exit(main())

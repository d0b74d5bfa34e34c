"""Command line: ``python -m grader list | check | bench | tune | demo | release | compile``.

    python -m grader list                          every exercise: kernel, signature, launch shape
    python -m grader check vector_add my.cu        visible cases on the kernel in my.cu
    python -m grader check vector_add my.cu --all  grading cases too (fresh random inputs)
    python -m grader compile my.cu                 NVRTC syntax check for sm_80/sm_90, no GPU needed
    python -m grader compile my.cu --exercise ID   ... with the exercise's options, for sm_90a if it requires it
    python -m grader bench flash_fwd_row my.cu     check, then time on the GPU against PyTorch/cuBLAS
    python -m grader bench capstone my.cu          module 11's kernel in all 8 configurations vs SDPA flash, cuDNN
        [--shape B=4,H=16,S=4096,d=64] [--dtype fp32] [--reps 10] [--repeats 3] [--json out.json]
    python -m grader tune EXERCISE my.cu           each configuration of the exercise's tuning space checked,
        [--shape B=4,H=16,S=4096,d=64] [--refresh] then timed on the GPU: the fastest, its -D options (cached)
    python -m grader profile matmul_tiled my.cu    memory requests per source line, on the emulator
        [--case NAME] [--json out.json]            (coalescing: sectors; bank conflicts: wavefronts)
    python -m grader demo                          the whole nbgrader pipeline on a demo class
    python -m grader release                       regenerate exercises/ and solutions/
    python -m grader release --student DIR         write the student bundle (no solutions, notebooks/ or tests)
    python -m grader start [DIR]                   copy the release into your working folder (~/flash-course-work)
    python -m grader lab [DIR]                     JupyterLab in that folder, without the instructor's nbgrader tools
    python -m grader doctor                        backend, tools, what is missing and how to install it
    python -m grader autograde MODULE              clean, sandboxed grading into the gradebook (--help)
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def _list(args) -> int:
    from .checks import REGISTRY, TRITON_REGISTRY, get_exercise

    get_exercise("vector_add")  # registers every module's exercises
    module = None
    for ex in [*REGISTRY.values(), *TRITON_REGISTRY.values()]:
        if ex.module != module:
            module = ex.module
            print(f"\n{module}")
        visible, hidden = len(ex.visible_cases()), len(ex.cases) - len(ex.visible_cases())
        print(f"  {ex.id}")
        print(f"    signature: {ex.signature}")
        print(f"    launch:    {ex.launch_shape}")
        print(f"    cases:     {visible} visible, {hidden} grading-only")
    return 0


def _check(args) -> int:
    from .backend import set_backend
    from .checks import run_check
    from .errors import CourseError

    try:
        if args.backend:
            set_backend(args.backend)
        source = Path(args.file).read_text()
        result = run_check(args.exercise, source, include_hidden=args.all, seed=args.seed, progress=sys.stderr)
    except (CourseError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(result.summary())
    # Faults first: a race or an out-of-bounds access explains wrong numbers in other cases.
    if not result.passed:
        print("\n" + result.first_failure.message)
    return 0 if result.passed else 1


def _compile(args) -> int:
    from .checks import REGISTRY, get_exercise
    from .errors import CourseError
    from .nvrtc import archs_for, compile_check

    try:
        if args.exercise and get_exercise(args.exercise) and args.exercise not in REGISTRY:
            raise CourseError(f"{args.exercise} is a Triton exercise: NVRTC builds CUDA C only")
        ex = REGISTRY.get(args.exercise)
        archs, options = (archs_for(ex.requires), ex.options) if ex else (archs_for(None), ())
        sizes = compile_check(Path(args.file).read_text(), archs, options, kernel=Path(args.file).name)
    except (CourseError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print("compiles for " + ", ".join(f"{arch} ({n} bytes of PTX)" for arch, n in sizes.items()))
    return 0


def _bench(args) -> int:
    from .benchmark import Budget, bench, merge_records
    from .errors import CourseError

    if args.exercise == "capstone":
        return _bench_capstone(args)

    try:
        report = bench(args.exercise, Path(args.file).read_text(), shape=args.shape, dtype=args.dtype,
                       repeats=args.repeats, budget=Budget(min_runs=args.reps, min_ms=args.min_ms),
                       baselines=not args.no_baselines)
    except (CourseError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(report.table())
    if not report.check_passed:
        return 1
    if args.json:
        merge_records(args.json, [report.record()])
        print(f"record written to {args.json} (key 'bench')")
    return 0


def _bench_capstone(args) -> int:
    from .benchmark import Budget, merge_records
    from .capstone import bench_capstone, table
    from .errors import CourseError

    try:
        seqs = [int(s) for s in args.seqs.split(",")]
        rows = bench_capstone(Path(args.file).read_text(), seqs=seqs, repeats=args.repeats,
                              budget=Budget(min_runs=args.reps, min_ms=args.min_ms), baselines=not args.no_baselines)
    except (CourseError, OSError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(table(rows))
    if not all(r.report.check_passed for r in rows):
        return 1
    if args.json:
        merge_records(args.json, [r.report.record() for r in rows])
        print(f"records written to {args.json} (key 'bench')")
    return 0


def _tune(args) -> int:
    from .autotune import tune
    from .errors import CourseError

    started = time.monotonic()

    def progress(done, total, row):
        took = time.monotonic() - started
        settings = " ".join(f"{k}={v}" for k, v in row.cfg.items())
        print(f"[{done}/{total}, {took:.0f} s] {settings}: {row.status}", file=sys.stderr, flush=True)

    try:
        result = tune(args.exercise, Path(args.file).read_text(), shape=args.shape, dtype=args.dtype,
                      refresh=args.refresh, progress=progress)
    except (CourseError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(result.table())
    return 0 if any(r.ok for r in result.rows) else 1


def _profile(args) -> int:
    import json

    from .emulator.profile import profile_case
    from .errors import CourseError

    try:
        profile, shown = profile_case(args.exercise, Path(args.file).read_text(), args.case)
    except (CourseError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"case {shown}")
    print(profile.table())
    if args.json:
        Path(args.json).write_text(json.dumps(profile.to_dict(), indent=1) + "\n")
        print(f"profile written to {args.json}")
    return 0


def _demo(args) -> int:
    from .classroom import demo

    return 0 if demo()["ok"] else 1


def _release(args) -> int:
    if args.student:
        from .student import student_bundle

        try:
            student_bundle(args.student, package=args.package)
        except (OSError, ValueError) as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        return 0
    from .classroom import release

    release()
    return 0


def _lab(args) -> int:
    from .student import lab

    try:
        lab(args.dir, args.jupyter_args)
    except (OSError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


def _start(args) -> int:
    from .student import start

    try:
        start(args.dir)
    except (OSError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


def _doctor(args) -> int:
    from .doctor import main as doctor

    return doctor(args)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["autograde"]:  # its own parser: grader/autograde/cli.py
        from .autograde.cli import main as autograde_main

        return autograde_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m grader", description="FlashAttention from scratch: run and check kernels")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="every exercise with kernel name, signature and launch shape").set_defaults(run=_list)
    p = sub.add_parser("check", help="check a kernel file against an exercise")
    p.add_argument("exercise")
    p.add_argument("file")
    p.add_argument("--all", action="store_true", help="also run the grading-only cases")
    p.add_argument("--backend", choices=["cpu", "gpu"])
    p.add_argument("--seed", type=int, help="seed for the grading-only cases (replay a failure)")
    p.set_defaults(run=_check)
    p = sub.add_parser("compile", help="NVRTC compile check for sm_80 and sm_90 (needs the nvrtc extra, no GPU)")
    p.add_argument("file")
    p.add_argument("--exercise", help="build as this exercise does: its -D options, and only the architecture "
                   "it requires (sm_90a) where it names one")
    p.set_defaults(run=_compile)
    p = sub.add_parser("bench", help="check a kernel, then time it on the GPU next to PyTorch/cuBLAS baselines "
                       "('capstone': module 11's kernel in all 8 configurations)")
    p.add_argument("exercise", help="an exercise id, or capstone")
    p.add_argument("file")
    p.add_argument("--shape", help="e.g. B=4,H=16,S=4096,d=64 (unnamed entries keep the defaults)")
    p.add_argument("--dtype", choices=["fp32", "fp16", "bf16"], help="default: the kernel's own")
    p.add_argument("--reps", type=int, default=10, help="at least this many timed runs (default 10)")
    p.add_argument("--min-ms", type=float, default=200.0, help="and at least this much timed work (default 200)")
    p.add_argument("--repeats", type=int, default=1, help="repeat the whole measurement to see run-to-run spread")
    p.add_argument("--no-baselines", action="store_true", help="time the kernel alone")
    p.add_argument("--seqs", default="4096", help="capstone only: the sequence lengths S, e.g. 4096,16384,32768")
    p.add_argument("--json", help="merge the result into this JSON file's 'bench' list")
    p.set_defaults(run=_bench)
    p = sub.add_parser("tune", help="compile a kernel for every configuration of its exercise's tuning space, "
                       "check each, time them on the GPU and keep the fastest")
    p.add_argument("exercise")
    p.add_argument("file")
    p.add_argument("--shape", help="the benchmark shape, e.g. B=4,H=16,S=4096,d=64 (unnamed entries keep the defaults)")
    p.add_argument("--dtype", choices=["fp32", "fp16", "bf16"], help="default: the kernel's own")
    p.add_argument("--refresh", action="store_true", help="tune again even if a result is cached")
    p.set_defaults(run=_tune)
    p = sub.add_parser("profile", help="memory requests per source line (sectors, bank conflicts) on the emulator")
    p.add_argument("exercise")
    p.add_argument("file")
    p.add_argument("--case", help="the case to run (default: the exercise's first visible case)")
    p.add_argument("--json", help="also write the profile as JSON")
    p.set_defaults(run=_profile)
    sub.add_parser("demo", help="release, grade and give feedback to a demo class on this machine").set_defaults(run=_demo)
    p = sub.add_parser("release", help="regenerate exercises/ and solutions/ from notebooks/ (--student DIR: write the student bundle)")
    p.add_argument("--student", metavar="DIR", help="write what students get into DIR instead: exercises/, readings, "
                   "plots, install instructions; no solutions, instructor notebooks or tests")
    p.add_argument("--package", help="what the bundle's README tells students to pip install (default: this repository's folder)")
    p.set_defaults(run=_release)
    p = sub.add_parser("start", help="copy the release into your own working folder (default ~/flash-course-work)")
    p.add_argument("dir", nargs="?", help="the working folder (created; existing files are kept)")
    p.set_defaults(run=_start)
    p = sub.add_parser("lab", help="JupyterLab in your working folder, without Formgrader, Create Assignment and the "
                       "course list (those are the instructor's)")
    p.add_argument("dir", nargs="?", help="the working folder (default ~/flash-course-work)")
    p.add_argument("jupyter_args", nargs=argparse.REMAINDER, help="passed on to jupyter lab (e.g. --no-browser)")
    p.set_defaults(run=_lab)
    p = sub.add_parser("doctor", help="backend, tools, what is missing and the command that installs it")
    p.add_argument("--json", action="store_true", help="print the items as JSON")
    p.set_defaults(run=_doctor)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())

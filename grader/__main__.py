"""Command line: ``python -m grader list | check | demo | release | compile``.

    python -m grader list                          every exercise: kernel, signature, launch shape
    python -m grader check vector_add my.cu        visible cases on the kernel in my.cu
    python -m grader check vector_add my.cu --all  grading cases too (fresh random inputs)
    python -m grader compile my.cu                 NVRTC syntax check for sm_80/sm_90, no GPU needed
    python -m grader demo                          the whole nbgrader pipeline on a demo class
    python -m grader release                       regenerate exercises/ and solutions/
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _list(args) -> int:
    from .checks import REGISTRY, get_exercise

    get_exercise("vector_add")  # registers every module's exercises
    module = None
    for ex in REGISTRY.values():
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
        result = run_check(args.exercise, source, include_hidden=args.all, seed=args.seed)
    except (CourseError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(result.summary())
    for r in result.results:
        if not r.passed:
            print("\n" + r.message)
            break
    return 0 if result.passed else 1


def _compile(args) -> int:
    from .errors import CourseError
    from .nvrtc import compile_check

    try:
        sizes = compile_check(Path(args.file).read_text(), kernel=Path(args.file).name)
    except (CourseError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print("compiles for " + ", ".join(f"{arch} ({n} bytes of PTX)" for arch, n in sizes.items()))
    return 0


def _demo(args) -> int:
    from .classroom import demo

    return 0 if demo()["ok"] else 1


def _release(args) -> int:
    from .classroom import release

    release()
    return 0


def main(argv=None) -> int:
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
    p.set_defaults(run=_compile)
    sub.add_parser("demo", help="release, grade and give feedback to a demo class on this machine").set_defaults(run=_demo)
    sub.add_parser("release", help="regenerate exercises/ and solutions/ from notebooks/").set_defaults(run=_release)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())

"""The grading worker: one check of one kernel, run inside the sandbox.

Started as ``python -I -S -c BOOT`` with the pristine copy of ``grader`` first on ``sys.path``
(never the course's own checkout). It reads one JSON job from **stdin** (the kernel's source,
the exercise, the derived seed, the limits: nothing of it is in the environment or in a file),
closes stdin, limits itself (rlimits, not dumpable so no other process of the sandbox can read
its memory or the seed), runs :func:`grader.checks.run_check` and writes one JSON result to the
file descriptor named in the job. The kernel runs in the emulator's launcher process, a child
of this one that inherits the rlimits and none of these descriptors.
"""
from __future__ import annotations

import ctypes
import json
import os
import resource
import sys
import traceback


def _limit(job: dict) -> None:
    lim = job.get("limits", {})
    pairs = [
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_CPU, lim.get("cpu_s")),
        (resource.RLIMIT_AS, lim.get("address_space")),
        (resource.RLIMIT_NPROC, lim.get("processes")),
        (resource.RLIMIT_FSIZE, lim.get("file_size")),
    ]
    for which, value in pairs:
        if value:
            hard = value + 5 if which == resource.RLIMIT_CPU else value
            try:
                resource.setrlimit(which, (value, hard))
            except (ValueError, OSError):
                pass
    try:  # PR_SET_DUMPABLE = 4: /proc/<pid>/mem, ptrace: closed to the kernel's processes
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)
    except Exception:  # noqa: BLE001
        pass


def _result(res) -> dict:
    cases = [{"name": r.case.name, "hidden": bool(r.case.hidden), "params": {k: (list(v) if isinstance(v, tuple) else v)
                                                                           for k, v in r.case.params.items()},
              "passed": bool(r.passed), "fault": bool(getattr(r, "fault", False)),
              "message": r.message[:4000]} for r in res.results]
    first = res.first_failure
    first_visible = next((r for r in res.results if not r.passed and not r.case.hidden), None)
    return {
        "status": "done",
        "backend": res.backend,
        "cases": cases,
        "visible_passed": all(c["passed"] for c in cases if not c["hidden"]) and bool(cases),
        "all_passed": all(c["passed"] for c in cases) and bool(cases),
        "summary": res.summary()[:20000],
        "first_failure": (first.message[:8000] if first else None),
        "first_visible_failure": (first_visible.message[:8000] if first_visible else None),
    }


class NvrtcMissing(Exception):
    """NVRTC could not be loaded in the sandbox: the check runs, and the report says so."""


def nvrtc_refusal(ex, source: str, options: tuple) -> str | None:
    """Why NVRTC (the compiler CuPy uses on a GPU) rejects a CUDA kernel, or None. The emulator
    builds kernels with g++, which also accepts host C++ (std::vector, <algorithm>): a kernel is
    graded only if it is CUDA that a GPU would build. Raises NvrtcMissing when NVRTC cannot load."""
    if getattr(ex, "kind", "cuda") != "cuda":
        return None
    from grader.errors import CompileError
    from grader.nvrtc import DEFAULT_ARCHS, compile_check

    try:
        compile_check(source, archs=DEFAULT_ARCHS[-1:], options=tuple(ex.options) + options, kernel=ex.kernel)
    except CompileError as err:
        return ("the kernel does not compile with NVRTC, the compiler used on a GPU (host C++ such as std::vector "
                f"or <algorithm> is not CUDA device code), so it is not run:\n  {err}")
    except Exception as err:  # noqa: BLE001  (not installed, or its library not found)
        raise NvrtcMissing(f"{type(err).__name__}: {str(err)[:300]}") from None
    return None


def main() -> None:
    job = json.loads(sys.stdin.buffer.read().decode())
    sys.stdin.close()
    out_fd = int(job["result_fd"])
    os.set_inheritable(out_fd, False)
    _limit(job)
    try:
        if job.get("kind") == "warm":
            from grader.autograde.warm import warm
            result = warm()
        else:
            from grader.backend import set_backend
            from grader.checks import get_exercise, run_check

            set_backend(job.get("backend", "cpu"))
            ex = get_exercise(job["exercise"])
            if job.get("draw_shapes", True):
                from grader.autograde.shapes import draw_cases

                ex.cases = draw_cases(ex.cases, int(job["shape_seed"]), ex.hidden_sizes)
            try:
                refusal, nvrtc = nvrtc_refusal(ex, job["source"], tuple(job.get("options", ()))), "ok"
            except NvrtcMissing as err:
                refusal, nvrtc = None, f"unavailable ({err})"
            if refusal is not None:
                from grader.checks import CaseResult, CheckResult

                res = CheckResult(ex.id, "cpu", [CaseResult(ex.cases[0], False, refusal, fault=True)])
            else:
                res = run_check(job["exercise"], job["source"], include_hidden=True, seed=int(job["seed"]),
                                options=tuple(job.get("options", ())))
            result = dict(_result(res), nvrtc=nvrtc)
    except BaseException as err:  # noqa: BLE001  (reported, never raised past the sandbox)
        result = {"status": "error", "error": f"{type(err).__name__}: {err}"[:4000],
                  "traceback": traceback.format_exc()[-6000:]}
    data = json.dumps(result).encode()
    with os.fdopen(out_fd, "wb", closefd=True) as f:
        f.write(data)
    try:
        from grader import emulator

        emulator.shutdown()
    except Exception:  # noqa: BLE001
        pass
    os._exit(0)


if __name__ == "__main__":
    main()

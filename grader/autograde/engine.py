"""Running a class's checks: jobs, seeds, a local pool or Dask, retries, progress."""
from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import hashlib
import sys
import time
from dataclasses import dataclass

from .runtime import Bundle, ensure_runtime, run_folder
from .sandbox import Limits, Outcome, Runtime, Stopped, kill_running, run_job


def derive_seed(run_seed: int, *parts: str) -> int:
    """A 31-bit seed for one student and exercise: the same whatever the parallelism or order."""
    h = hashlib.sha256("\x1f".join([str(run_seed), *parts]).encode()).digest()
    return int.from_bytes(h[:4], "little") & 0x7FFFFFFF


@dataclass
class Job:
    key: tuple  # (student, notebook, exercise)
    payload: dict  # what the worker reads on stdin


@dataclass
class JobResult:
    key: tuple
    outcome: Outcome
    attempts: int
    retried_because: str | None = None


class Progress:
    def __init__(self, total: int, workers: int, stream=None, every_s: float = 5.0):
        self.total, self.workers, self.done = total, workers, 0
        self.t0 = time.monotonic()
        self.stream = stream if stream is not None else sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.every_s, self.last = every_s, 0.0

    def line(self) -> str:
        el = time.monotonic() - self.t0
        eta = (el / self.done * (self.total - self.done)) if self.done else float("nan")
        pct = 100.0 * self.done / max(1, self.total)
        bar = "#" * int(pct / 5)
        eta_s = "?" if eta != eta else _mmss(eta)
        return (f"[{bar:<20}] {self.done}/{self.total} checks ({pct:.0f}%), {_mmss(el)} elapsed, "
                f"ETA {eta_s}, {self.workers} worker(s)")

    def step(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if self.tty:
            self.stream.write("\r" + self.line())
            if self.done == self.total:
                self.stream.write("\n")
            self.stream.flush()
        elif now - self.last >= self.every_s or self.done == self.total:
            self.last = now
            self.stream.write(self.line() + "\n")
            self.stream.flush()


def _mmss(s: float) -> str:
    s = int(round(s))
    return f"{s // 60}m{s % 60:02d}s"


RETRY = ("died", "error", "lost")


def lost(err: BaseException) -> Outcome:
    """The outcome of a check that never ran to an end for a reason outside the submission (a
    sandbox that could not start, a Dask worker or scheduler lost): it is reported as not graded,
    never scored."""
    return Outcome("lost", None, f"{type(err).__name__}: {err}"[:2000], 0, 0.0, None)


def _with_retry(run_once, job: Job) -> JobResult:
    first = run_once(job)
    if first.status not in RETRY:
        return JobResult(job.key, first, 1)
    second = run_once(job)
    why = f"{first.status}: " + ((first.result or {}).get("error") or first.output[-300:] or f"exit {first.returncode}")
    return JobResult(job.key, second, 2, why)


def run_local(rt: Runtime, jobs: list[Job], limits: Limits, workers: int, progress: Progress | None) -> list[JobResult]:
    """Every job in its own sandboxed process, ``workers`` at a time (threads only wait). Ctrl-C
    (KeyboardInterrupt) cancels the queued jobs, kills the running sandboxes and is re-raised."""
    def once(job: Job) -> Outcome:
        try:
            return run_job(rt, job.payload, limits)
        except Stopped:
            raise
        except Exception as err:  # noqa: BLE001  (the sandbox did not start: the check did not run)
            return lost(err)

    results = []
    pool = cf.ThreadPoolExecutor(max_workers=max(1, workers))
    try:
        futs = [pool.submit(_with_retry, once, job) for job in jobs]
        for fut in cf.as_completed(futs):
            results.append(fut.result())
            if progress:
                progress.step()
    except BaseException:
        kill_running()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown()
    order = {job.key: i for i, job in enumerate(jobs)}
    return sorted(results, key=lambda r: order[r.key])


# --------------------------------------------------------------------------- Dask


def _dask_task(bundle: Bundle, limits: Limits, base: str | None, payload: dict) -> dict:
    """Runs on a Dask worker: unpack the pristine bundle there (once per run), then the job."""
    rt = ensure_runtime(bundle, limits, run_folder(bundle, base))
    out = run_job(rt, payload, limits)
    return dataclasses.asdict(out)


CONNECT_S = 10.0  # how long to try reaching a Dask scheduler before saying it is unreachable


def run_dask(scheduler: str, bundle: Bundle, jobs: list[Job], limits: Limits, progress: Progress | None,
             base: str | None = None) -> list[JobResult]:
    try:
        from dask.distributed import Client, as_completed
    except ImportError as err:
        raise SystemExit(f"--scheduler needs Dask: pip install dask distributed ({err})") from None
    results: dict[tuple, JobResult] = {}
    try:
        client = Client(scheduler, timeout=CONNECT_S)
    except (OSError, TimeoutError) as err:
        raise SystemExit(f"cannot reach the Dask scheduler {scheduler} within {CONNECT_S:g} s: "
                         f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}") from None
    by_future: dict = {}
    try:
        remote_bundle = client.scatter(bundle, broadcast=True)
        for job in jobs:
            f = client.submit(_dask_task, remote_bundle, limits, base, job.payload, pure=False, retries=0)
            by_future[f] = (job, 1, None)
        ac = as_completed(list(by_future))
        for fut in ac:
            job, attempt, why = by_future.pop(fut)
            try:
                out = Outcome(**fut.result())
            except Exception as err:  # noqa: BLE001  (a worker lost: KilledWorker and the like)
                out = lost(err)
            if out.status in RETRY and attempt == 1 and client.status == "running":
                reason = f"{out.status}: " + ((out.result or {}).get("error") or out.output[-300:])
                nf = client.submit(_dask_task, remote_bundle, limits, base, job.payload, pure=False, retries=0)
                by_future[nf] = (job, 2, reason)
                ac.add(nf)
                continue
            results[job.key] = JobResult(job.key, out, attempt, why)
            if progress:
                progress.step()
    except KeyboardInterrupt:
        client.cancel(list(by_future), force=True)
        raise
    except Exception as err:  # noqa: BLE001  (the scheduler lost: every check not back did not run)
        gone = lost(err)
        for job in jobs:
            results.setdefault(job.key, JobResult(job.key, gone, 1))
    finally:
        try:
            client.close(timeout=5)
        except Exception:  # noqa: BLE001  (closing a client whose scheduler is gone)
            pass
    return [results[j.key] for j in jobs]

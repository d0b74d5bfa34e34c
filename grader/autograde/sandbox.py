"""Running one grading job in a sandbox: bubblewrap, rlimits, a wall clock, capped output.

``bwrap`` (Debian ``bubblewrap``) gives each check:

* no network (``--unshare-net``), its own PID, IPC, UTS and cgroup namespaces, and a user
  namespace where it is ``nobody`` with no capabilities (``--unshare-user --uid 65534
  --cap-drop ALL --disable-userns``), so nothing can be remounted writable;
* a file system of read-only system folders (``/usr``, ``/lib*``, ``/bin``, ``/etc/ld.so*``),
  the Python installation and its virtual environment read-only, the run's **pristine** copy
  of ``grader`` read-only, the run's emulator cache read-only with an empty private
  ``kernels/`` tmpfs on top, and a private tmpfs ``/tmp`` and ``HOME``. The course directory,
  the gradebook and every submission are simply not there;
* ``--die-with-parent`` and ``--new-session``: killing the sandbox kills its PID namespace, so
  no process a submission starts outlives its check;
* a clean environment (``--clearenv``): only what the check needs; the seed comes on stdin.

The worker then sets rlimits on itself and everything it starts (CPU seconds, address space,
processes, file size, no core files). As root, whose processes the kernel does not count against
RLIMIT_NPROC, each check runs in a pids cgroup of its own (``pids.max``) where one is writable. The
check's time limit is CPU seconds, its own work: outside, the parent adds up the CPU time of the
job's processes (``job_cpu_seconds``) and kills the whole process group at ``cpu_s``, or at the
wall-clock cap far above it (a busy machine must not fail a check); ``launch_s`` CPU seconds bound
each kernel launch in the emulator. The parent keeps at most ``output_bytes`` of stdout/stderr.

Without ``bwrap`` the job runs in a plain child process in its own session (same limits,
a private cache folder, no file-system or network isolation), and the report says so.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

INSIDE = Path("/run/grader")  # where the run's pieces appear in the sandbox
BOOT = ("import sys; sys.path[:0] = [{pkg!r}, {site!r}]; "
        "from grader.autograde._worker import main; main()")


def bwrap_path() -> str | None:
    """bwrap, if it is installed AND can make the sandbox here: unprivileged user namespaces are
    off on some machines and containers, where bwrap runs but every sandbox fails."""
    return _usable_bwrap(shutil.which("bwrap"))


_BWRAP_WORKS: dict[str, bool] = {}  # bwrap's answer, per path, once it gave one


def _usable_bwrap(path: str | None) -> str | None:
    if path is None:
        return None
    if path not in _BWRAP_WORKS:
        try:
            probe = subprocess.run([path, "--unshare-all", "--unshare-user", "--uid", "65534", "--gid", "65534",
                                    "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "true"],
                                   capture_output=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            return None  # not remembered: a probe that timed out on a loaded machine is asked again
        _BWRAP_WORKS[path] = probe.returncode == 0
    return path if _BWRAP_WORKS[path] else None


def pids_cgroup() -> Path | None:
    """A pids cgroup hierarchy this process may make groups in (v1 ``pids``, or v2 with the pids
    controller), or None. The kernel does not enforce RLIMIT_NPROC for root, so as root a check's
    process limit is held by a pids.max group of its own instead (it holds for any user)."""
    for base in (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup")):
        try:
            v2 = (base / "cgroup.subtree_control").exists()
            if v2 and "pids" not in (base / "cgroup.subtree_control").read_text().split():
                continue
            if (base / "cgroup.procs").exists() and (v2 or (base / "tasks").exists()) and os.access(base, os.W_OK):
                return base
        except OSError:
            continue
    return None


def process_limit_note() -> str | None:
    """What the report says when the process limit cannot hold (root without a pids cgroup)."""
    if os.geteuid() == 0 and pids_cgroup() is None:
        return ("grading as root without a writable pids cgroup: the kernel does not enforce the process limit "
                "(RLIMIT_NPROC) for root, so a fork bomb runs until its wall-clock limit; grade as another user")
    return None


class _PidsGroup:
    """One check's pids cgroup: at most ``limit`` processes, all killed when the check ends."""

    def __init__(self, base: Path, limit: int):
        import secrets

        self.path = base / f"fa-autograde-{os.getpid()}-{secrets.token_hex(6)}"
        self.path.mkdir()
        (self.path / "pids.max").write_text(f"{limit}\n")

    def wrap(self, argv: list) -> list:
        # the shell joins the group before it execs the sandbox: nothing runs outside it
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.path / "cgroup.procs"), *argv]

    def close(self) -> None:
        for _ in range(200):
            try:
                pids = (self.path / "cgroup.procs").read_text().split()
            except OSError:
                return
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (OSError, ValueError):
                    pass
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.02)


WALL_CAP_FACTOR = 10  # a check's wall-clock cap, in multiples of its CPU seconds


@dataclass
class Limits:
    """What one check may use. Time counts the check's own work, CPU seconds, so a busy machine
    (more checks than cores, other users) slows a check down without failing it; the wall clock
    only caps it far above, for a check blocked without using the CPU."""

    cpu_s: float = 120.0  # CPU seconds of the check, compile and every case (RLIMIT_CPU of each of its processes)
    launch_s: float = 20.0  # CPU seconds of one kernel launch (GRADER_TIME_LIMIT in the worker)
    wall_s: float | None = None  # the wall-clock cap: WALL_CAP_FACTOR times cpu_s unless given
    address_space: int = 8 << 30
    processes: int = 256
    file_size: int = 256 << 20
    output_bytes: int = 64 << 10
    tmpfs_bytes: int = 512 << 20

    def __post_init__(self):
        if self.wall_s is None:
            self.wall_s = self.cpu_s * WALL_CAP_FACTOR

    def rlimits(self) -> dict:
        return {"cpu_s": math.ceil(self.cpu_s), "address_space": self.address_space, "processes": self.processes,
                "file_size": self.file_size}


@dataclass
class Runtime:
    """Where a run's pieces are on this machine, and how a job reaches them."""

    pkg_parent: Path  # holds the pristine grader/ (read-only)
    cache: Path  # the run's emulator cache (launcher, pch; read-only once warm)
    scratch: Path  # private per-job folders are made under it (no-sandbox mode)
    use_bwrap: bool
    gpu_devices: list = field(default_factory=list)

    def site_packages(self) -> str:
        return sysconfig.get_paths()["purelib"]


def _python_binds() -> list[str]:
    exe = Path(sys.executable)
    roots = {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(), exe.resolve().parent.parent}
    roots.add(Path(sys.prefix))  # the venv path as the interpreter sees it (symlinks kept)
    out = []
    for r in sorted(roots, key=str):
        if str(r) in ("/", "/usr") or str(r).startswith("/usr/"):
            continue
        out += ["--ro-bind", str(r), str(r)]
    return out


def _system_binds() -> list[str]:
    out = []
    for p in ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32"):
        if os.path.islink(p):
            out += ["--symlink", os.readlink(p), p]
        elif os.path.isdir(p):
            out += ["--ro-bind", p, p]
    for p in ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives"):
        if os.path.exists(p):
            out += ["--ro-bind", p, p]
    return out


def gpu_devices() -> list[str]:
    return sorted(str(p) for p in Path("/dev").glob("nvidia*"))


def bwrap_command(rt: Runtime, job_dir: Path | None, *, writable_cache: bool, limits: Limits) -> list[str]:
    cmd = [bwrap_path(), "--unshare-all", "--unshare-user", "--uid", "65534", "--gid", "65534",
           "--disable-userns", "--cap-drop", "ALL", "--die-with-parent", "--new-session",
           "--hostname", "grader", "--clearenv",
           "--proc", "/proc", "--dev", "/dev",
           "--size", str(limits.tmpfs_bytes), "--tmpfs", "/tmp",
           *_system_binds(), *_python_binds(),
           "--dir", str(INSIDE),
           "--ro-bind", str(rt.pkg_parent), str(INSIDE / "pkg")]
    cmd += (["--bind" if writable_cache else "--ro-bind", str(rt.cache), str(INSIDE / "cache")])
    if not writable_cache:
        cmd += ["--size", str(limits.tmpfs_bytes), "--tmpfs", str(INSIDE / "cache" / "kernels")]
    cmd += ["--size", str(64 << 20), "--tmpfs", "/home/student", "--chdir", "/tmp"]
    for dev in rt.gpu_devices:
        cmd += ["--dev-bind", dev, dev]
    return cmd


def _cuda_home(site: str) -> dict:
    """CUDA_HOME for NVRTC from the pip wheels: the worker runs with ``-S``, where CuPy's library
    finder does not see the virtual environment's site-packages."""
    found = sorted(Path(site, "nvidia").glob("cu*/lib/libnvrtc.so*"))
    return {"CUDA_HOME": str(found[-1].parent.parent)} if found else {}


def job_env(rt: Runtime, cache: Path, home: Path, tmp: Path, limits: Limits, threads: int = 1) -> dict:
    return {
        **_cuda_home(rt.site_packages()),
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "TMPDIR": str(tmp),
        "LANG": "C.UTF-8",
        "GRADER_CACHE_DIR": str(cache),
        "GRADER_TIME_LIMIT": repr(float(limits.launch_s)),
        "GRADER_EMULATOR_THREADS": str(threads),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }


@dataclass
class Outcome:
    status: str  # "done" | "error" | "timeout" | "died" | "lost" (never ran to an end: not a score)
    result: dict | None
    output: str  # the first bytes of stdout+stderr
    output_dropped: int
    seconds: float
    returncode: int | None


def _drain(stream, keep: int, box: dict) -> None:
    kept, dropped = bytearray(), 0
    while True:
        chunk = stream.read(65536)
        if not chunk:
            break
        room = keep - len(kept)
        if room > 0:
            kept += chunk[:room]
        dropped += max(0, len(chunk) - max(room, 0))
    box["kept"], box["dropped"] = bytes(kept), dropped


def _kill_marked(marker: str) -> None:
    """No-sandbox mode: kill processes that left the job's session but carry its marker."""
    me = os.getpid()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == me:
            continue
        try:
            if marker.encode() in (d / "environ").read_bytes():
                os.kill(int(d.name), signal.SIGKILL)
        except (OSError, ValueError):
            pass


_RUNNING: set = set()  # the sandboxes started and not yet reaped, so an interrupted run can kill them
_RUNNING_LOCK = threading.Lock()
_STOPPED = threading.Event()  # set by kill_running(): no new sandbox starts in this process


class Stopped(RuntimeError):
    """The run was interrupted: this job's sandbox was not started (or was killed)."""


def kill_running() -> int:
    """Kill every sandbox this process started and still runs, and start no new one; returns
    how many were killed. Used on Ctrl-C / SIGTERM (their checks are then not graded)."""
    _STOPPED.set()
    with _RUNNING_LOCK:
        procs = list(_RUNNING)
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
    return len(procs)


def allow_new_sandboxes() -> None:
    """Undo kill_running() for a later run in the same process."""
    _STOPPED.clear()


def spawn(argv: list, **popen) -> subprocess.Popen:
    """Start a sandbox's process in its own session, registered for kill_running()."""
    with _RUNNING_LOCK:
        if _STOPPED.is_set():
            raise Stopped("the run was interrupted")
        proc = subprocess.Popen(argv, start_new_session=True, **popen)
        _RUNNING.add(proc)
    return proc


def reap(proc: subprocess.Popen) -> None:
    with _RUNNING_LOCK:
        _RUNNING.discard(proc)


CPU_POLL_S = 1.0  # how often a running job's CPU time is read


def job_cpu_seconds(root: int) -> float:
    """CPU seconds of a process and every live descendant, with the children each has reaped (bwrap,
    the namespace's init, reaps orphans): the job's own work over all its processes, which per-process
    RLIMIT_CPU alone would let a job multiply by starting more processes."""
    tick = os.sysconf("SC_CLK_TCK")
    parent, used = {}, {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        parent[int(d)] = int(fields[1])
        used[int(d)] = sum(int(v) for v in fields[11:15]) / tick  # utime stime cutime cstime
    total, todo = 0.0, [root]
    children: dict = {}
    for pid, ppid in parent.items():
        children.setdefault(ppid, []).append(pid)
    while todo:
        pid = todo.pop()
        total += used.get(pid, 0.0)
        todo += children.get(pid, [])
    return total


def _wait_within(proc: subprocess.Popen, limits: Limits, t0: float) -> bool:
    """Wait for the job; True when it ran out of time: its CPU seconds over all its processes, or
    the wall-clock cap far above them."""
    while True:
        try:
            proc.wait(timeout=CPU_POLL_S)
            return False
        except subprocess.TimeoutExpired:
            pass
        if time.monotonic() - t0 >= limits.wall_s or job_cpu_seconds(proc.pid) >= limits.cpu_s:
            return True


def _cpu_limit_signal(returncode: int | None) -> bool:
    """Whether the job ended on RLIMIT_CPU's SIGXCPU (bwrap passes a signal on as 128 + its number)."""
    return returncode in (-signal.SIGXCPU, 128 + signal.SIGXCPU)


def run_job(rt: Runtime, job: dict, limits: Limits, *, writable_cache: bool = False) -> Outcome:
    """Run one job (see ``_worker``) and return what came back. Never raises for anything
    the job does; raises only when the sandbox itself cannot be started."""
    import tempfile

    group = None
    r, w = os.pipe()
    private = Path(tempfile.mkdtemp(prefix="job-", dir=rt.scratch))
    marker = f"GRADER_JOB_MARK={os.path.basename(private)}"
    try:
        if rt.use_bwrap:
            pkg, cache = INSIDE / "pkg", INSIDE / "cache"
            home, tmp = Path("/home/student"), Path("/tmp")
            env = job_env(rt, cache, home, tmp, limits)
            argv = bwrap_command(rt, None, writable_cache=writable_cache, limits=limits)
            for k, v in env.items():
                argv += ["--setenv", k, v]
            argv += ["--", sys.executable, "-I", "-S", "-c", BOOT.format(pkg=str(pkg), site=rt.site_packages())]
            popen_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        else:
            home, tmp = private / "home", private / "tmp"
            home.mkdir()
            tmp.mkdir()
            if writable_cache:
                cache = rt.cache
            else:  # a private cache: links to the warm pieces, its own kernels/
                cache = private / "cache"
                cache.mkdir()
                (cache / "kernels").mkdir()
                for name in os.listdir(rt.cache):
                    if name != "kernels":
                        os.symlink(rt.cache / name, cache / name)
            popen_env = job_env(rt, cache, home, tmp, limits)
            popen_env[marker.split("=")[0]] = marker.split("=")[1]
            argv = [sys.executable, "-I", "-S", "-c", BOOT.format(pkg=str(rt.pkg_parent), site=rt.site_packages())]
        job = dict(job, result_fd=w, limits=limits.rlimits())
        cgroup_base = pids_cgroup() if os.geteuid() == 0 else None
        if cgroup_base is not None:
            group = _PidsGroup(cgroup_base, limits.processes)
            argv = group.wrap(argv)
        t0 = time.monotonic()
        proc = spawn(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                     pass_fds=(w,), env=popen_env, cwd=str(private))
        os.close(w)
        w = -1
        box_out, box_res = {}, {}
        t_out = threading.Thread(target=_drain, args=(proc.stdout, limits.output_bytes, box_out), daemon=True)
        t_res = threading.Thread(target=_drain, args=(os.fdopen(r, "rb", closefd=True), 64 << 20, box_res),
                                 daemon=True)
        r = -1
        t_out.start()
        t_res.start()
        try:
            proc.stdin.write(json.dumps(job).encode())
            proc.stdin.close()
        except OSError:
            pass
        try:
            timed_out = _wait_within(proc, limits, t0)
        except BaseException:  # Ctrl-C in the thread that waits (the runtime's warm-up): kill, then stop
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
            reap(proc)
            raise
        # Whatever happened, nothing of the job survives it.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        if not rt.use_bwrap:
            _kill_marked(marker)
        if group is not None:
            group.close()
        proc.wait()
        reap(proc)
        if _STOPPED.is_set():
            raise Stopped("the run was interrupted")
        t_res.join(10)
        t_out.join(10)
        seconds = time.monotonic() - t0
        output = box_out.get("kept", b"").decode(errors="replace")
        dropped = box_out.get("dropped", 0)
        raw = box_res.get("kept", b"")
        result = None
        if raw:
            try:
                result = json.loads(raw.decode())
            except ValueError:
                result = None
        if result is not None:
            status = "error" if result.get("status") == "error" else "done"
        elif timed_out or _cpu_limit_signal(proc.returncode):
            status = "timeout"
        else:
            status = "died"
        return Outcome(status, result, output, dropped, seconds, proc.returncode)
    finally:
        if group is not None:
            group.close()
        for fd in (r, w):
            if fd >= 0:
                os.close(fd)
        shutil.rmtree(private, ignore_errors=True)

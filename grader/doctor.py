"""``python -m grader doctor``: what runs the kernels here, which tools are present, and for
each missing one what it costs and the command that installs it.

One line per item. Exit status 1 when something *required* is missing (the course cannot run
its notebooks as written), 0 otherwise; missing optional tools are listed with what they add.

    python -m grader doctor
    python -m grader doctor --json      the same, machine-readable
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

OK, MISSING, ABSENT, INFO = "ok", "MISSING", "absent", "info"


@dataclass
class Item:
    name: str
    status: str  # OK, MISSING (required), ABSENT (optional), INFO
    detail: str  # what was found, or what its absence costs
    fix: str = ""  # the command that installs it

    @property
    def required_missing(self) -> bool:
        return self.status == MISSING


def _apt(package: str) -> str:
    sudo = "" if os.name != "posix" or os.geteuid() == 0 else "sudo "
    return f"{sudo}apt-get install {package}"


def _pip(spec: str) -> str:
    return f"{Path(sys.executable)} -m pip install {spec}"


def _python() -> Item:
    v = sys.version_info
    ok = v >= (3, 10)
    return Item("python", OK if ok else MISSING, f"{v.major}.{v.minor}.{v.micro} at {sys.executable}",
                "" if ok else "Python 3.10 or newer (python3 -m venv .venv with a newer python3)")


def _package() -> Item:
    import grader

    where = Path(grader.__file__).resolve().parent
    try:
        from importlib.metadata import version

        ver = version("flash-attention-course")
    except Exception:  # noqa: BLE001  (imported from a source tree, not installed)
        ver = "not installed"
    return Item("grader", OK, f"flash-attention-course {ver}, imported from {where}")


def _backend() -> tuple[Item, str | None]:
    from .backend import backend
    from .errors import BackendUnavailableError

    forced = os.environ.get("GRADER_BACKEND", "").strip()
    why = f" (GRADER_BACKEND={forced})" if forced else " (auto: a GPU when CuPy sees one, else the CPU emulator)"
    try:
        name = backend()
    except BackendUnavailableError as err:
        return Item("backend", MISSING, str(err), "unset GRADER_BACKEND, or install CuPy on a GPU machine"), None
    what = "gpu: kernels run on an NVIDIA GPU through CuPy" if name == "gpu" else "cpu: kernels run on the CPU emulator"
    return Item("backend", OK, what + why), name


def _gxx(required: bool) -> Item:
    from . import emulator

    path = emulator.gxx()
    if path:
        return Item("g++", OK, emulator.compiler_id(path))
    cost = "the CPU emulator cannot compile kernels" + ("" if required else " (needed only without a GPU)")
    return Item("g++", MISSING if required else ABSENT, cost, _apt("g++"))


def _boost() -> Item:
    from . import emulator

    if emulator.boost_available():
        return Item("Boost.Context", OK, "fast fibers for the emulator")
    return Item("Boost.Context", ABSENT, "the emulator uses ucontext fibers: correct, several times slower",
                _apt("libboost-context-dev"))


def _clang(required: bool) -> Item:
    from . import emulator

    path = emulator.clang()
    if path:
        return Item("clang-16", OK, f"{emulator.compiler_id(path)}: count_io, race detector, memory profiler, cp.async checks")
    cost = ("count_io (the notebooks' byte counts), the race detector and the memory profiler are unavailable"
            + ("" if required else " (emulator features; this machine runs kernels on its GPU)"))
    return Item("clang-16", MISSING if required else ABSENT, cost, _apt("clang-16"))


def _nvrtc() -> Item:
    try:
        from cupy_backends.cuda.libs import nvrtc

        major, minor = nvrtc.getVersion()
        return Item("NVRTC", OK, f"NVRTC {major}.{minor}: `python -m grader compile` checks kernels for sm_80/sm_90")
    except Exception as err:  # noqa: BLE001  (ImportError, or a CuPy without its NVRTC library)
        return Item("NVRTC", ABSENT, f"`python -m grader compile` (offline sm_80/sm_90 compile check) unavailable, "
                    "and the clean regrade (`python -m grader autograde`) cannot reject host C++ that the emulator "
                    f"accepts ({type(err).__name__})", _pip("-e '.[nvrtc]'"))


def _gpu(name: str | None) -> Item:
    from .backend import gpu_status

    ok, reason = gpu_status()
    if ok:
        return Item("CuPy/GPU", OK, reason + ("" if name == "gpu" else " (not the active backend)"))
    try:
        import cupy  # noqa: F401

        return Item("CuPy/GPU", INFO, reason + ": kernels run on the emulator")
    except ImportError:
        return Item("CuPy/GPU", ABSENT, "no CuPy: kernels run on the emulator (on an NVIDIA GPU machine install "
                    "the extra for its CUDA version)", _pip("-e '.[cuda12]'") + "  (or '.[cuda13]')")


def _triton() -> Item:
    """Module 12's Triton cells: read from the installed packages' metadata (importing torch takes
    seconds)."""
    found = {p: v for p in ("triton", "torch") if (v := _installed(p))}
    if len(found) == 2:
        mode = "compiled for the GPU" if _gpu_ok() else "run by Triton's CPU interpreter"
        return Item("Triton", OK, f"triton {found['triton']}, torch {found['torch']}: module 12's cells {mode}")
    missing = ", ".join(p for p in ("triton", "torch") if p not in found)
    return Item("Triton", ABSENT, f"module 12 (FlashAttention in Triton) cannot run: {missing} not installed",
                _pip("-e '.[triton]'"))


def _gpu_ok() -> bool:
    from .backend import gpu_status

    return gpu_status()[0]


def _installed(package: str) -> str | None:
    """The installed version of ``package``, from its metadata (importing nbgrader takes seconds)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None


def _nbgrader() -> Item:
    ver = _installed("nbgrader")
    if ver:
        return Item("nbgrader", OK, f"nbgrader {ver} (grading and the %%cuda stubs)")
    return Item("nbgrader", MISSING, "releasing and grading with nbgrader unavailable", _pip("-e ."))


def _jupyter() -> Item:
    ver = _installed("jupyterlab")
    if ver:
        return Item("JupyterLab", OK, f"jupyterlab {ver}")
    return Item("JupyterLab", MISSING, "the notebooks cannot be opened", _pip("-e ."))


def _alembic() -> Item:
    """nbgrader runs ``alembic`` as a subprocess (gradebook migrations): it must be on PATH."""
    here = Path(sys.executable).parent
    found = shutil.which("alembic")
    if found and Path(found).resolve().parent == here.resolve():
        return Item("alembic on PATH", OK, f"{found} (nbgrader's gradebook migrations)")
    if (here / "alembic").exists():
        return Item("alembic on PATH", ABSENT, f"{here} is not first on PATH: Formgrader hangs on its first load "
                    "(FileNotFoundError: 'alembic'); instructors only", f'export PATH="{here}:$PATH"')
    return Item("alembic on PATH", ABSENT, "alembic is not installed next to nbgrader (instructors only)", _pip("-e ."))


def _bubblewrap() -> Item:
    path = shutil.which("bwrap")
    if path is None:
        return Item("bubblewrap", ABSENT, "grading runs students' code without a sandbox (instructors only)",
                    _apt("bubblewrap"))
    try:
        run = subprocess.run([path, "--ro-bind", "/", "/", "--dev", "/dev", "--unshare-all", "true"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as err:
        return Item("bubblewrap", INFO, f"{path} present but did not run ({err})")
    if run.returncode != 0:
        why = (run.stderr.strip().splitlines() or ["no message"])[-1]
        return Item("bubblewrap", INFO, f"{path} present but cannot make a sandbox here ({why}): "
                    "unprivileged user namespaces may be off")
    return Item("bubblewrap", OK, f"{path}: sandboxed grading available")


def diagnose() -> list[Item]:
    """Every item, in the order printed."""
    items = [_python(), _package()]
    b, name = _backend()
    items.append(b)
    on_cpu = name != "gpu"
    items += [_gxx(required=on_cpu), _boost(), _clang(required=on_cpu), _nvrtc(), _gpu(name), _triton(),
              _nbgrader(), _jupyter(), _alembic(), _bubblewrap()]
    return items


def report(items: list[Item]) -> str:
    width = max(len(i.name) for i in items)
    lines = []
    for i in items:
        line = f"{i.status:8s} {i.name.ljust(width)}  {i.detail}"
        if i.fix and i.status != OK:
            line += f"  ->  {i.fix}"
        lines.append(line)
    missing = [i for i in items if i.required_missing]
    system = [i for i in items if i.status in (MISSING, ABSENT) and "apt-get" in i.fix]
    lines.append("")
    if missing:
        lines.append("required: " + ", ".join(i.name for i in missing) + " missing; install them as shown above")
    else:
        lines.append("everything required is here" + (" (absent ones are optional)" if any(i.status == ABSENT for i in items) else ""))
    if system:
        lines.append("`bash .ci/setup` (in a clone of the course) installs the system packages and the virtual environment")
    return "\n".join(lines)


def main(args=None) -> int:
    items = diagnose()
    if getattr(args, "json", False):
        import json

        print(json.dumps([asdict(i) for i in items], indent=1))
    else:
        print(report(items))
    return 1 if any(i.required_missing for i in items) else 0

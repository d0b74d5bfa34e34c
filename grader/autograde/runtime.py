"""A grading run's private pieces: the pristine copy of ``grader`` and the emulator cache.

The copy is made once per run from the course's ``grader/`` folder (or, with ``ref``, from a
git commit), byte for byte without caches, then made read-only, in a folder new to the run
(never a name reused across runs, which code run before the run could have prepared). Jobs carry it as a *bundle*
(tar bytes and their hash) so Dask workers on other machines unpack the same bytes.
"""
from __future__ import annotations

import fcntl
import hashlib
import io
import os
import shutil
import stat
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .sandbox import Limits, Runtime, bwrap_path, gpu_devices, run_job

_SKIP = {"__pycache__", ".ipynb_checkpoints"}


def bundle_from_dir(pkg: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(pkg.rglob("*")):
            rel = path.relative_to(pkg.parent)
            if any(part in _SKIP for part in rel.parts) or path.suffix == ".pyc" or path.is_symlink():
                continue
            info = tar.gettarinfo(str(path), arcname=rel.as_posix())
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 0
            if path.is_file():
                with open(path, "rb") as f:
                    tar.addfile(info, f)
            elif path.is_dir():
                tar.addfile(info)
    return buf.getvalue()


def bundle_from_git(root: Path, ref: str) -> bytes:
    data = subprocess.run(["git", "-C", str(root), "archive", "--format=tar", ref, "grader"],
                          check=True, capture_output=True).stdout
    # re-pack so the bytes depend on the files only
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(tmp, filter="data")
        return bundle_from_dir(Path(tmp) / "grader")


def bundle_hash(bundle: bytes) -> str:
    return hashlib.sha256(bundle).hexdigest()[:16]


def _read_only(root: Path) -> None:
    for dirpath, dirnames, filenames in os.walk(root):
        for f in filenames:
            p = os.path.join(dirpath, f)
            os.chmod(p, os.stat(p).st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    for dirpath, dirnames, filenames in os.walk(root, topdown=False):
        os.chmod(dirpath, 0o555)


def _make_writable(root: Path) -> None:
    for dirpath, dirnames, filenames in os.walk(root):
        os.chmod(dirpath, 0o755)


@dataclass
class Bundle:
    data: bytes
    digest: str
    run_id: str


def ensure_runtime(bundle: Bundle, limits: Limits, base: Path, use_bwrap: bool | None = None) -> Runtime:
    """Unpack the bundle into ``base`` (this run's own folder: see :func:`run_folder`) and warm
    the emulator cache there, once per run (a file lock makes concurrent callers on one machine
    wait for the first)."""
    base = Path(base)
    base.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = base.stat()
    if st.st_uid != os.getuid() or stat.S_IMODE(st.st_mode) != 0o700:
        raise RuntimeError(f"{base}: not this user's private folder; refusing to grade with it")
    if use_bwrap is None:
        use_bwrap = bwrap_path() is not None
    with open(base / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        pkg_parent, cache, scratch = base / "pkg", base / "cache", base / "scratch"
        rt = Runtime(pkg_parent, cache, scratch, use_bwrap, gpu_devices() if use_bwrap else [])
        if (base / ".ready").exists():
            return rt
        for p in (pkg_parent, cache, scratch):
            if p.exists():
                _make_writable(p)
                shutil.rmtree(p)
        pkg_parent.mkdir()
        with tarfile.open(fileobj=io.BytesIO(bundle.data)) as tar:
            tar.extractall(pkg_parent, filter="data")
        _read_only(pkg_parent)
        cache.mkdir()
        (cache / "kernels").mkdir()
        scratch.mkdir(mode=0o700)
        out = run_job(rt, {"kind": "warm"}, Limits(wall_s=max(300.0, limits.wall_s)), writable_cache=True)
        if out.status != "done" or not (out.result or {}).get("ok"):
            detail = (out.result or {}).get("traceback") or (out.result or {}).get("error") or out.output
            raise RuntimeError(f"warming the grading sandbox failed ({out.status}): {detail[-3000:]}")
        if use_bwrap:
            # the kernels/ folder is shadowed by a private tmpfs in each check; empty it
            for p in (cache / "kernels").iterdir():
                shutil.rmtree(p) if p.is_dir() else p.unlink()
        _read_only(cache)
        (base / ".ready").write_text("ok\n")
        return rt


def run_folder(bundle: Bundle, base: str | None = None) -> Path:
    """The run's folder on a Dask worker: named by the run's random id (128 bits), so no earlier
    run, and nothing that cannot see this run's jobs, can have prepared it."""
    return Path(base or tempfile.gettempdir()) / f"fa-autograde-{os.getuid()}-{bundle.run_id}"


def remove_runtime(base: Path) -> None:
    """Remove a run's folder (its read-only pieces made writable first)."""
    _make_writable(base)
    shutil.rmtree(base, ignore_errors=True)

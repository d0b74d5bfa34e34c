"""Course-owned kernels and helpers that released notebooks use, shipped inside the package.

A released notebook must run from a student bundle (``python -m grader release --student``),
where there are no instructor notebooks or solutions. What a notebook needs beyond the
student's own kernels lives here:

* :func:`naive_attention` -- the naive attention pipeline (``S = scale·QKᵀ`` and ``P`` in global
  memory) that module 04 measures its flash kernels against. Its kernels
  (``naive_attention.cu``) are the course's own baseline, written with other launch shapes than
  module 01's exercises; they move exactly the bytes of the formula module 04 prints.
* :func:`own_kernel` -- a kernel the student wrote in an earlier module's notebook of the same
  working copy (module 06 times its backward pass next to the student's own forward kernel),
  or None when that notebook or kernel is missing or still the stub.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..arrays import empty
from ..backend import backend as active
from ..kernel import RawKernel
from ..launch import ceil_div
from ..source import cell_code

HERE = Path(__file__).resolve().parent
NAIVE_ATTENTION_SOURCE = HERE / "naive_attention.cu"
NAIVE_KERNELS = ("baseline_scores", "baseline_softmax", "baseline_pv")
STUB_MARK = "YOUR CODE HERE"

_cache: dict = {}


def _kernels(backend: str | None = None) -> dict:
    key = backend or active()
    if key not in _cache:
        code = NAIVE_ATTENTION_SOURCE.read_text()
        _cache[key] = {name: RawKernel(code, name, backend=key) for name in NAIVE_KERNELS}
    return _cache[key]


def naive_attention(Q, K, V, O, N: int, d: int, scale, *, S=None, P=None, threads: int = 256):
    """A launcher for the naive attention pipeline on one head.

    ``Q, K, V, O``: ``[N, d]`` float32 arrays on the active backend (``grader.to_device``);
    ``S, P``: the ``[N, N]`` scratch arrays (allocated here when not given). Returns
    ``launch(count_io=False) -> [LaunchReport, LaunchReport, LaunchReport]``: each call runs
    the three kernels (scores, softmax, PV) and writes ``O``. On the emulator ``count_io=True``
    counts their global bytes: reads ``2N²d + 3N² + 2N²d`` floats, writes ``2N² + Nd``.
    """

    kernels = _kernels()
    S = empty((N, N)) if S is None else S
    P = empty((N, N)) if P is None else P
    n32, d32, scale = np.int32(N), np.int32(d), np.float32(scale)
    grid_scores = min(ceil_div(N * N, threads), 4096)
    grid_pv = min(ceil_div(N * d, threads), 4096)
    warps_per_block = 4

    def launch(count_io: bool = False):
        io = {"count_io": True} if count_io else {}
        return [
            kernels["baseline_scores"](grid_scores, threads, (Q, K, S, n32, d32, scale), **io),
            kernels["baseline_softmax"](ceil_div(N, warps_per_block), 32 * warps_per_block, (S, P, n32), **io),
            kernels["baseline_pv"](grid_pv, threads, (P, V, O, n32, d32), **io),
        ]

    launch.scratch = (S, P)
    return launch


def own_kernel(module: str, name: str, folder: Path | str | None = None):
    """The student's own ``%%cuda name`` kernel from module ``module``'s notebook in the same
    working copy, compiled, or None when the notebook or the kernel is missing, or the kernel is
    still the stub (or does not compile).

    ``folder``: where the module folders are (default: the parent of the current directory, as
    in a notebook whose working directory is its module's folder)."""

    base = Path(folder) if folder is not None else Path.cwd().parent
    found = sorted((base / module).glob("*.ipynb"))
    if not found:
        return None
    try:
        cells = json.loads(found[0].read_text())["cells"]
    except (OSError, ValueError, KeyError):
        return None
    for cell in cells:
        src = "".join(cell.get("source", "")) if cell.get("cell_type") == "code" else ""
        first, _, body = src.partition("\n")
        words = first.split()
        if len(words) >= 2 and words[0] == "%%cuda" and words[1] == name:
            if STUB_MARK in body:
                return None
            try:
                return RawKernel(cell_code(body), name, options=tuple(words[2:])).compile()
            except Exception:  # noqa: BLE001  (the student's kernel does not build: no comparison)
                return None
    return None

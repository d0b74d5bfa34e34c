"""Where the course's pieces live, and reading kernels out of notebooks.

The instructor notebooks in ``notebooks/`` are the one source of truth for every solution
kernel: tests, the GPU runs and the command line read kernels from there rather than keeping
copies that could drift.
"""
from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAGIC = "%%cuda"
TRITON_MAGIC = "%%triton"


def notebook_of(module: str, folder: str = "notebooks", root: Path = ROOT) -> Path:
    found = sorted((root / folder / module).glob("*.ipynb"))
    if len(found) != 1:
        raise FileNotFoundError(f"expected one notebook in {root / folder / module}, found {len(found)}")
    return found[0]


def modules(root: Path = ROOT) -> list[str]:
    return sorted(p.name for p in (root / "notebooks").iterdir() if p.is_dir() and any(p.glob("*.ipynb")))


def cuda_cells(path: Path, magic: str = MAGIC) -> dict[str, str]:
    """``{kernel name: source}`` for every ``%%cuda`` cell of a notebook (``magic``: another cell
    magic, ``%%triton``), magic line removed."""
    nb = json.loads(Path(path).read_text())
    kernels = {}
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        src = "".join(cell["source"])
        first, _, body = src.partition("\n")
        if first.split()[:1] == [magic]:
            kernels[first.split()[1]] = body
    return kernels


def solution_source(exercise_id: str, root: Path = ROOT) -> str:
    """The instructor's kernel for an exercise, read from its module's notebook."""
    from .checks import get_exercise

    ex = get_exercise(exercise_id)
    magic = TRITON_MAGIC if getattr(ex, "kind", "cuda") == "triton" else MAGIC
    return cuda_cells(notebook_of(ex.module, root=root), magic)[ex.kernel]

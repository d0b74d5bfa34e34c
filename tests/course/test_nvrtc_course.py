"""Every kernel of the course builds for real GPUs (sm_80, sm_90, or only the architecture its
exercise requires, sm_90a) with NVRTC, the compiler CuPy uses on a GPU: instructor solutions and
given kernels, the released stubs students start from, and the known-wrong kernels (wrong at run
time, never at compile time). No GPU is needed."""
from pathlib import Path

import pytest

from grader.checks import REGISTRY, get_exercise
from grader.course import cuda_cells, modules, notebook_of
from grader.nvrtc import archs_for, compile_check
from grader.wrong_corpus import wrong_kernels

pytest.importorskip("cupy_backends.cuda.libs.nvrtc", reason="needs the nvrtc extra: pip install -e '.[nvrtc]'")


get_exercise("vector_add")  # registers every exercise


def requires_of(kernel: str) -> str | None:
    """The architecture the rows of a kernel require (they agree: one kernel, one build)."""
    (needed,) = {ex.requires for ex in REGISTRY.values() if ex.kernel == kernel} or {None}
    return needed


def notebook_kernels(folder):
    for module in modules():
        for name, src in cuda_cells(notebook_of(module, folder=folder)).items():
            yield pytest.param(src, archs_for(requires_of(name)), id=f"{folder}/{module}/{name}")


WRONG = [pytest.param(k, archs_for(get_exercise(k.exercise).requires), id=f"wrong/{k.exercise}/{k.name}")
         for k in wrong_kernels()]


@pytest.mark.parametrize("source, archs", [*notebook_kernels("notebooks"), *notebook_kernels("exercises"), *WRONG])
def test_builds_for_its_architectures(source, archs):
    sizes = compile_check(source if isinstance(source, str) else source.source(), archs)  # a wrong kernel: edit applied
    assert set(sizes) == set(archs) and min(sizes.values()) > 0

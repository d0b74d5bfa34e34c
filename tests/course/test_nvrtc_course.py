"""Every kernel of the course builds for real GPUs (sm_80, sm_90) with NVRTC, the compiler CuPy
uses on a GPU: instructor solutions and given kernels, the released stubs students start from,
and the known-wrong kernels (wrong at run time, never at compile time). No GPU is needed."""
from pathlib import Path

import pytest

from grader.course import cuda_cells, modules, notebook_of
from grader.nvrtc import compile_check
from grader.wrong_corpus import wrong_kernels

pytest.importorskip("cupy_backends.cuda.libs.nvrtc", reason="needs the nvrtc extra: pip install -e '.[nvrtc]'")


def notebook_kernels(folder):
    for module in modules():
        for name, src in cuda_cells(notebook_of(module, folder=folder)).items():
            yield pytest.param(src, id=f"{folder}/{module}/{name}")


WRONG = [pytest.param(k, id=f"wrong/{k.exercise}/{k.name}") for k in wrong_kernels()]


@pytest.mark.parametrize("source", [*notebook_kernels("notebooks"), *notebook_kernels("exercises"), *WRONG])
def test_builds_for_sm80_and_sm90(source):
    sizes = compile_check(source if isinstance(source, str) else source.source())  # a wrong kernel: edit applied here
    assert set(sizes) == {"sm_80", "sm_90"} and min(sizes.values()) > 0

"""benchmarks/matmul_parts.py off the GPU: its variants are edits of module 09's solution, so they must still
apply to it (the reading's table of its results: tests/course/test_readings_current.py)."""
import pytest

from repo_scripts import load_script


parts = load_script("benchmarks/matmul_parts.py", "matmul_parts_under_test")


def test_every_variant_is_one_edit_away_from_the_solution():
    from grader.course import solution_source

    solution = solution_source("mma_matmul_pipe")
    sources = parts.variant_sources()
    assert sources["whole"] == solution
    memory, compute = sources["memory side"], sources["compute side"]
    # the lambda's definition and the prologue's first slice stay; the loop's two loads go
    assert "mma_m16n8k16_f16" not in memory and memory.count("load_fragments(") == solution.count("load_fragments(") - 2
    assert "copier.copy" in memory and "cp_async_wait" in memory and "__syncthreads" in memory
    assert "if (false) copier.copy(" in compute and "mma_m16n8k16_f16" in compute
    assert "i < B_CHUNKS / 2" in sources["half the B copies"]


def test_every_variant_compiles_for_sm_90():
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    parts.compile_main()

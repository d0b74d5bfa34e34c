"""The tuning spaces the course registers for its own exercises: each holds the exercise's graded
build, launches it as the exercise does, and turns away what the kernel cannot run."""
from types import SimpleNamespace

from grader import autotune
from grader.checks import get_exercise
from grader.exercises import m09_pipelines as m09


def test_the_pipelined_matmul_space_holds_the_exercise_build_and_excludes_spilling_warp_tiles():
    ex = get_exercise("mma_matmul_pipe")
    space = autotune.SPACES["mma_matmul_pipe"]
    build = dict(BM=m09.GEMM_BM, BN=m09.GEMM_BN, WARPS_M=m09.GEMM_WARPS[0], WARPS_N=m09.GEMM_WARPS[1], BK=m09.GEMM_BK,
                 STAGES=m09.GEMM_STAGES)
    assert build in autotune.configurations(space) and space.exclude(build) is None
    p = SimpleNamespace(M=4096, N=4096, K=4096)
    assert (space.grid(p, build), space.block(p, build), space.shared_mem(p, build)) == (ex.grid(p), ex.block(p),
                                                                                        ex.shared_mem(p))
    assert "256 accumulator registers" in space.exclude(dict(build, BN=256))  # a 64 x 128 warp tile
    assert "not made of 16 x 16" in space.exclude(dict(build, BM=128, WARPS_M=16))

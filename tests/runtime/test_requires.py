"""An exercise that `requires` an architecture (sm_90a: wgmma, TMA): refused in one sentence on a GPU
without it, run by the emulator, built by NVRTC for that architecture alone."""
import dataclasses

import pytest

from grader import checks
from grader.__main__ import main
from grader.checks import get_exercise, refuse_unsupported, run_check
from grader.course import solution_source
from grader.device import models_for, runs_on
from grader.errors import BackendUnavailableError
from grader.nvrtc import archs_for

SM90A_ONLY = ("#ifndef __CUDA_ARCH_FEAT_SM90_ALL\n#error built without sm_90a\n#endif\n"
              "__global__ void k(float* x) { x[threadIdx.x] = 1.0f; }\n")


def wgmma_row():
    return dataclasses.replace(get_exercise("vector_add"), id="vector_add_sm90a", requires="sm_90a")


def test_architecture_rules():
    assert runs_on("sm_90a", "90") and not runs_on("sm_90a", "100") and not runs_on("sm_90a", "80")
    assert runs_on("sm_80", "90") and runs_on("sm_90", "90") and not runs_on("sm_90", "80")
    assert models_for("sm_90a") == "H100 SXM or H200"
    assert models_for("sm_80") == "H100 SXM or H200 or A100 SXM 80GB"


def test_a_gpu_without_it_is_refused_in_one_sentence(monkeypatch):
    monkeypatch.setattr(checks, "compute_capability", lambda: "80")
    with pytest.raises(BackendUnavailableError) as err:
        run_check(wgmma_row(), solution_source("vector_add"), backend="gpu")
    assert str(err.value) == ("vector_add_sm90a needs sm_90a (an H100 SXM or H200) and this GPU is sm_80: run it on "
                              "the CPU emulator instead (GRADER_BACKEND=cpu, or grader.set_backend('cpu') in a "
                              "notebook).")
    monkeypatch.setattr(checks, "compute_capability", lambda: "90")
    assert refuse_unsupported(wgmma_row(), "gpu") is None


def test_the_emulator_runs_it(monkeypatch):
    def no_gpu():
        raise AssertionError("the emulator needs no GPU's architecture")

    monkeypatch.setattr(checks, "compute_capability", no_gpu)
    assert run_check(wgmma_row(), solution_source("vector_add"), backend="cpu").passed


def test_nvrtc_builds_it_for_sm90a_only(tmp_path, monkeypatch, capsys):
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc", reason="needs the nvrtc extra: pip install -e '.[nvrtc]'")
    assert archs_for(None) == ("sm_80", "sm_90") and archs_for("sm_90a") == ("sm_90a",)
    source = tmp_path / "k.cu"
    source.write_text(SM90A_ONLY)
    assert main(["compile", str(source)]) == 1  # the course's default architectures lack the feature macro
    assert "#error directive: built without sm_90a" in capsys.readouterr().err
    monkeypatch.setitem(checks.REGISTRY, "vector_add_sm90a", wgmma_row())
    assert main(["compile", str(source), "--exercise", "vector_add_sm90a"]) == 0
    assert capsys.readouterr().out.startswith("compiles for sm_90a (")

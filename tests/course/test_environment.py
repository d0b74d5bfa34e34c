"""conda cannot run on the course's machines, so environment.yml is linted instead: it parses,
every spec is valid conda syntax, and it names the same packages as pyproject.toml."""
import re
try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib
from pathlib import Path

import yaml
from rattler import MatchSpec

ROOT = Path(__file__).resolve().parents[2]
# conda-forge packages with no PyPI counterpart in pyproject (toolchain, not Python deps)
CONDA_ONLY = {"python", "pip", "cxx-compiler", "libboost-devel"}
# pyproject extras conda users do not get from environment.yml (GPU / NVRTC wheels, module 12's
# Triton and PyTorch, which conda-forge names differently: the file says how to add them)
PIP_ONLY_EXTRAS = {"cuda12", "cuda13", "nvrtc", "triton"}
# PyPI names that conda-forge spells otherwise (its "playwright" is the Node.js tool)
CONDA_NAMES = {"playwright": "playwright-python"}


def pip_name(req: str) -> str:
    return re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0].lower()


def test_environment_matches_pyproject():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert env["channels"] == ["conda-forge"]
    conda, pip_section = [], None
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            pip_section = dep["pip"]
            continue
        conda.append(MatchSpec(dep))  # raises on an invalid spec
    assert pip_section == ["--no-deps", "-e ."]
    names = {m.name.normalized for m in conda}

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {pip_name(r) for r in project["dependencies"]}
    for extra, reqs in project["optional-dependencies"].items():
        if extra not in PIP_ONLY_EXTRAS:
            wanted |= {pip_name(r) for r in reqs}
    assert names - CONDA_ONLY == {CONDA_NAMES.get(n, n) for n in wanted}


def test_pins_agree():
    env = (ROOT / "environment.yml").read_text()
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert "nbgrader=0.9.6" in env and '"nbgrader==0.9.6"' in pyproject
    assert "jupyterlab>=4.2,<5" in env and '"jupyterlab>=4.2,<5"' in pyproject

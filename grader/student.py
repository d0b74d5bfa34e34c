"""What students get: a bundle that stands alone, and a working copy of it.

* :func:`student_bundle` (``python -m grader release --student DIR``) writes the release a class
  hands out: ``exercises/`` (the nbgrader release), the readings and their figures
  (``modules/NN_*/README.md`` and ``img/``), the measured GPU plots the notebooks show
  (``benchmarks/results/*.png``) and a README with the install instructions. Never the
  instructor notebooks, the solutions or the tests (nor ``tests/wrong``).
* :func:`start` (``python -m grader start [DIR]``) copies that release into a working folder of
  the student's own (default ``~/flash-course-work``) that ``git pull`` and an instructor's
  regeneration never touch; run again, it adds what is new and keeps every file already there.
* :func:`lab` (``python -m grader lab [DIR]``) opens JupyterLab in that folder as students should
  see it: the instructor's parts of nbgrader (Formgrader, Create Assignment, the course list and
  the Nbgrader menu) switched off through the Jupyter config in ``grader/student_jupyter/``;
  Validate and the assignment list stay.

Everything a released notebook needs beyond the student's own kernels comes from the
installed ``grader`` package (``grader.baselines``), never from the course repository.
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from .course import ROOT, modules as course_modules

RELEASE = "exercises"
READINGS = "modules"
PLOTS = "benchmarks/results"
DEFAULT_WORKSPACE = Path.home() / "flash-course-work"
STUDENT_JUPYTER = Path(__file__).parent / "student_jupyter"  # labconfig/ and jupyter_server_config.json
# Never in a student bundle: instructor notebooks, solutions, tests (tests/wrong included),
# the gradebook and its submissions.
PRIVATE = ("notebooks", "solutions", "tests", "grading", "nbgrader_config.py")
_IGNORE = shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__", "*.pyc")

STUDENT_README = """\
# FlashAttention from scratch: your copy of the exercises

{intro}

## Set up (once)

On Debian/Ubuntu (no GPU needed: kernels run on the course's CPU emulator):

```bash
sudo apt-get install g++ libboost-context-dev clang-16 python3-venv
python3 -m venv .venv
.venv/bin/pip install "{package}"
.venv/bin/python -m grader doctor      # what runs your kernels, and anything missing
```

`grader doctor` lists every tool with the command that installs it when it is missing. On a
machine with an NVIDIA GPU, also install CuPy for your CUDA version:
`.venv/bin/pip install cupy-cuda12x` (or `cupy-cuda13x`).

## Work

```bash
.venv/bin/python -m grader lab .
```

from this folder (not from `exercises/`, so the links to the readings work): JupyterLab as a
student needs it, without the instructor's grading tools. Then open
`exercises/00_launching_kernels/` and go module by module: read `modules/NN_*/README.md`,
write each kernel in its `%%cuda NAME` cell and run the check cell below it.

| folder | what |
|---|---|
| `exercises/` | one notebook per module: your work goes here |
| `modules/` | the readings, with their figures |
| `benchmarks/results/` | plots measured on an H100, shown by the notebooks when you have no GPU |

Hand in the notebook of a module (`exercises/NN_*/*.ipynb`) as your instructor asks.
"""


def _copy(src: Path, dest: Path) -> None:
    if src.is_dir():
        shutil.copytree(src, dest, ignore=_IGNORE, dirs_exist_ok=True)
    else:
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)


def student_bundle(dest: Path | str, root: Path | str = ROOT, *, package: str | None = None,
                   quiet: bool = False) -> Path:
    """Write the student release of the course at ``root`` into ``dest`` (created; must be
    empty or missing). ``package``: what the README tells students to ``pip install`` (default:
    the course repository's folder, ``root``; give a git URL or a wheel for a class).
    Returns ``dest``."""
    root, dest = Path(root).resolve(), Path(dest).resolve()
    if dest.exists() and any(dest.iterdir()):
        raise FileExistsError(f"{dest} is not empty: give a new or empty folder for the student bundle")
    if root in (dest, *dest.parents):
        raise ValueError(f"{dest} is inside the course repository {root}: write the bundle elsewhere")
    if not (root / RELEASE).is_dir():
        raise FileNotFoundError(f"{root / RELEASE} is missing: run `python -m grader release` first")
    mods = [m for m in course_modules(root) if (root / RELEASE / m).is_dir()]
    dest.mkdir(parents=True, exist_ok=True)
    for m in mods:
        _copy(root / RELEASE / m, dest / RELEASE / m)
        reading = root / READINGS / m
        if (reading / "README.md").exists():
            _copy(reading / "README.md", dest / READINGS / m / "README.md")
        if (reading / "img").is_dir():
            _copy(reading / "img", dest / READINGS / m / "img")
    if (root / READINGS / "README.md").exists():
        _copy(root / READINGS / "README.md", dest / READINGS / "README.md")
    for png in sorted((root / PLOTS).glob("*.png")):
        _copy(png, dest / PLOTS / png.name)
    intro = (f"The released exercises of {len(mods)} modules ({mods[0]} to {mods[-1]}). "
             "The kernels you write run on your machine; the checks come with the `grader` package.") if mods else ""
    (dest / "README.md").write_text(STUDENT_README.format(intro=intro, package=package or str(root)))
    leaked = [p for p in PRIVATE if (dest / p).exists()]
    assert not leaked, f"student bundle holds private folders: {leaked}"
    if not quiet:
        print(f"student bundle: {dest} ({len(mods)} modules: exercises/, modules/, {PLOTS}/, README.md)")
    return dest


def start(dest: Path | str | None = None, root: Path | str = ROOT, *, quiet: bool = False) -> dict:
    """Copy the release into the student's working folder ``dest`` (default
    ``~/flash-course-work``). A new folder gets the whole bundle; an existing one gets only the
    files it does not have yet (a new module, a new figure): nothing already there is
    overwritten, so a student's notebooks survive. Returns ``{"workspace", "added", "kept"}``."""
    import tempfile

    dest = Path(dest).expanduser().resolve() if dest is not None else DEFAULT_WORKSPACE
    root = Path(root)
    added, kept = [], []
    with tempfile.TemporaryDirectory(prefix="fa-start-") as tmp:
        fresh = student_bundle(Path(tmp) / "bundle", root, quiet=True)
        for src in sorted(p for p in fresh.rglob("*") if p.is_file()):
            rel = src.relative_to(fresh)
            target = dest / rel
            if target.exists():
                kept.append(rel.as_posix())
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)
            added.append(rel.as_posix())
    if not quiet:
        what = f"{len(added)} file(s) added" + (f", {len(kept)} already there and kept as they are" if kept else "")
        print(f"your working copy: {dest} ({what})")
        print("work there, not in the course repository (git pull never touches it):")
        print(f"  {sys.executable} -m grader lab {dest}")
    return {"workspace": dest, "added": added, "kept": kept}


def lab_environment(env=None) -> dict:
    """``env`` (default: this process's) with the student Jupyter config first on JUPYTER_CONFIG_PATH."""
    env = dict(os.environ if env is None else env)
    rest = env.get("JUPYTER_CONFIG_PATH")
    env["JUPYTER_CONFIG_PATH"] = os.pathsep.join([str(STUDENT_JUPYTER)] + ([rest] if rest else []))
    return env


def lab(dest: Path | str | None = None, extra: list | tuple = ()) -> None:
    """Replace this process with JupyterLab in the working folder ``dest`` (default
    ``~/flash-course-work``), the instructor's nbgrader parts switched off."""
    dest = Path(dest).expanduser().resolve() if dest is not None else DEFAULT_WORKSPACE
    if not dest.is_dir():
        raise ValueError(f"{dest} does not exist: run `python -m grader start` first to make your working copy")
    jupyter = Path(sys.executable).parent / "jupyter"
    os.chdir(dest)
    os.execve(str(jupyter), [str(jupyter), "lab", *extra], lab_environment())

"""Regenerate the figures of every module: python modules/make_figures.py [--check] [NN ...]

Runs each modules/NN_name/make_figures.py in its own interpreter (so matplotlib state never
leaks between modules), then checks that every PNG stays small enough to commit. With
arguments, only the modules whose number or folder name is given are redrawn, e.g.
`python modules/make_figures.py 02 03`. Exit status 1 if any script fails or any PNG is
over the size limit. `--check` writes nothing: each script computes its tables from the
committed data and fails if a generated region of its README differs (figstyle.CHECK).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
MAX_PNG_BYTES = 150_000


def module_scripts(selected: list[str]) -> list[Path]:
    scripts = sorted(HERE.glob("[0-9][0-9]_*/make_figures.py"))
    if selected:
        scripts = [s for s in scripts if any(s.parent.name == a or s.parent.name.startswith(a + "_") for a in selected)]
    return scripts


def main(argv: list[str]) -> int:
    check = "--check" in argv
    argv = [a for a in argv if a != "--check"]
    scripts = module_scripts(argv)
    if not scripts:
        print("no module figure scripts matched", argv or "")
        return 1
    failed = []
    env = dict(os.environ, FIGURES_CHECK="1" if check else "0")
    for script in scripts:
        rc = subprocess.run([sys.executable, str(script)], cwd=HERE.parent, env=env).returncode
        if rc:
            failed.append(f"{script.relative_to(HERE.parent)} exited with {rc}")
    for script in scripts:
        for png in sorted((script.parent / "img").glob("*.png")):
            size = png.stat().st_size
            if size > MAX_PNG_BYTES:
                failed.append(f"{png.relative_to(HERE.parent)} is {size} bytes (limit {MAX_PNG_BYTES})")
    for line in failed:
        print("FAILED:", line, file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

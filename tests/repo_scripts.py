"""The repository's scripts (benchmarks, figure makers), imported by path as the tests read them."""
import importlib.util

from grader.course import ROOT


def load_script(relative: str, name: str):
    """``ROOT / relative`` executed as a fresh module called ``name`` (a new name gives a fresh copy)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / relative)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

"""The grader's layers, read from its source with ast (nothing is imported): no cycle among the
imports a module runs when it loads, no private name imported from another module, and the spec
layer (the exercise rows, their benchmark and tuning specs, hint texts) importing nothing of the
runtime that grades them, not even inside a function."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

GRADER = Path(__file__).resolve().parents[2] / "grader"

# What the exercise rows may import: the vocabulary and pure NumPy helpers beneath them.
BASE = {"grader.errors", "grader.device", "grader.launch", "grader.reference", "grader.arrays", "grader.backend"}
SPEC = {"grader.exercise_rows", "grader.benchspec", "grader.exercises"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(GRADER.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(GRADER.rglob("*.py"))}


def is_spec(name: str) -> bool:
    return any(name == s or name.startswith(s + ".") for s in SPEC)


def imports(name: str):
    """(target module, imported name or None, at load time?, line) for each grader import of ``name``."""
    path = MODULES[name]
    tree = ast.parse(path.read_text())
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]

    def walk(node, at_load):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    base = ".".join(package[:len(package) - child.level + 1] + ([base] if base else []))
                if base == "grader" or base.startswith("grader."):
                    for alias in child.names:
                        sub = f"{base}.{alias.name}"
                        yield (sub, None, at_load, child.lineno) if sub in MODULES else (base, alias.name, at_load,
                                                                                            child.lineno)
            elif isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name == "grader" or alias.name.startswith("grader."):
                        yield alias.name, None, at_load, child.lineno
            else:
                inside = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                yield from walk(child, at_load and not inside)

    yield from walk(tree, True)


def test_the_reader_sees_the_grader():
    # a walk that found nothing would pass every rule below
    assert len(MODULES) > 40 and "grader.exercises.m08_tensor_cores" in MODULES
    rows = {(t, n) for t, n, at_load, _ in imports("grader.exercises.m09_pipelines") if at_load}
    assert ("grader.exercise_rows", "Exercise") in rows
    assert ("grader.classroom", "demo", False) in {(t, n, a) for t, n, a, _ in imports("grader.__main__")}


# Imports made inside a function that point up the layers, each with why it cannot be at the top.
# Every other function-local import is there for cost (a command's own module, an optional backend)
# and must point down: the graph counting them too has no cycle either.
UPWARD = {
    ("grader.emulator.profile", "grader.checks"): "profile_case runs a case: notebooks import it from here",
    ("grader.emulator.profile", "grader.kernel"): "profile_case compiles the student's kernel: as above",
}


def load_graph(with_local: bool = False) -> dict[str, set[str]]:
    graph = {}
    for name in MODULES:
        edges = set()
        for target, _, at_load, _ in imports(name):
            if (at_load or with_local) and (name, target) not in UPWARD:
                parts = target.split(".")
                # importing grader.a.b runs grader.a's __init__ first, unless the importer is inside grader.a
                # (whose __init__ is then already running)
                edges.update(p for p in (".".join(parts[:i]) for i in range(2, len(parts) + 1))
                             if p == target or not name.startswith(p + "."))
        graph[name] = {t for t in edges if t in MODULES and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_at_load_time():
    assert cycles(load_graph()) == []


def test_no_cycle_hidden_in_a_function():
    # a function-local import that closes a cycle only hides it until the function runs
    assert cycles(load_graph(with_local=True)) == []
    graph = load_graph(with_local=True)
    # and each exception is still needed: put back, it closes a cycle
    assert all(cycles({**graph, name: graph[name] | {target}}) for name, target in UPWARD)


def test_no_private_name_crosses_modules():
    crossing = [f"{name}:{line} imports {target}.{what}" for name in MODULES
                for target, what, _, line in imports(name)
                if what and what.startswith("_") and not what.startswith("__") and target != name]
    private_modules = [f"{name}:{line} imports {target}" for name in MODULES for target, _, _, line in imports(name)
                       if any(p.startswith("_") and not p.startswith("__") for p in target.split("."))
                       and target.rsplit(".", 1)[0] != name.rsplit(".", 1)[0] and not target.startswith(name + ".")]
    assert crossing == [] and private_modules == []


@pytest.mark.parametrize("name", sorted(n for n in MODULES if is_spec(n)))
def test_spec_layer_imports_no_runtime(name):
    runtime = sorted({f"{target} (line {line})" for target, _, _, line in imports(name)
                      if target != "grader" and target not in BASE and not is_spec(target)})
    assert runtime == [], f"{name} reaches into the runtime"

"""The import graph of xlang (and of backends/ and tasks/ beside it): no circles, counting the imports at a module's
top and those inside its functions alike (a lazy import hides a circle from Python, not from the next reader)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("xlang", "backends", "tasks")


def _modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _resolve(name: str, modules) -> str | None:
    """The module an imported name loads: the longest prefix of it that is one of ours (a name imported from a
    package's __init__ resolves to the package)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> dict[str, set[str]]:
    """{module: the modules of ours it imports anywhere in its body}."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found.update(_resolve(alias.name, modules) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the package, `level - 1` packages up
                    up = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                found.update(_resolve(f"{base}.{alias.name}", modules) for alias in node.names)
        found.discard(None)
        found.discard(name)
        graph[name] = found
    return graph


def reachable(graph: dict, starts) -> set:
    """Every module imported at any depth from starts (themselves included)."""
    seen, todo = set(), list(starts)
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(graph[module])
    return seen


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_imports_at_the_top_and_inside_functions():
    graph = import_graph()
    assert "xlang.errors" in graph["xlang.backend"]  # at the top
    assert "xlang.toolchain" in graph["xlang.backend"]  # inside require_build_tools
    assert "xlang.report.tables" in graph["xlang.report"]  # from a package: its module
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circles():
    found = circles(import_graph())
    assert not found, "import circles: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_jails_imports_stay_inside_the_runner_package():
    """What a candidate's process and a static build import (the runner, the child entry point, the backends, the
    tasks' definitions, at any depth) is all in the minimal runner package the jail shows: an import moved to a
    module's top must not pull in the agent, the reports or fixit (sandbox._RUNNER_SKIP)."""
    from xlang.sandbox import _RUNNER_SKIP

    graph = import_graph()
    starts = ["xlang.profiler.runner", "xlang.child"] + [
        m for m in graph if m.split(".")[0] in ("backends", "tasks") and not set(m.split(".")) & _RUNNER_SKIP]
    seen = reachable(graph, starts)
    outside = sorted(m for m in seen if set(m.split(".")) & _RUNNER_SKIP)
    assert "xlang.backend" in seen and not outside, outside


def test_the_judge_imports_nothing_of_the_parents_side():
    """xlang/profiler/judge/ is what runs in the judge process: it reaches (at any depth) no stage module, no
    pipeline, no evaluate. The parent imports down into it, never the other way (issue 48)."""
    graph = import_graph()
    judge = [m for m in graph if m == "xlang.profiler.judge" or m.startswith("xlang.profiler.judge.")]
    assert "xlang.profiler.judge.main" in judge and "xlang.profiler.judge.plan" in judge
    seen = reachable(graph, judge)
    up = sorted(m for m in seen if m.startswith("xlang.profiler.stages") or m in (
        "xlang.profiler.pipeline", "xlang.profiler.evaluate", "xlang.profiler.commands"))
    assert not up, up

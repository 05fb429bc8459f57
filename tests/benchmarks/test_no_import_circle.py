"""The benchmarks package imports without circles: ``python -m benchmarks`` (its ``__main__``) runs
the suite, so no benchmark imports ``__main__`` back; what they share (the record they write,
``DEFAULT_OUTPUT``) lives in ``benchmarks.common``, which imports no benchmark."""

from __future__ import annotations

import ast
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def imports() -> dict[str, set[str]]:
    """Module -> the modules of ``benchmarks`` it imports (at the top or inside a function)."""
    graph: dict[str, set[str]] = {}
    for source in BENCHMARKS.glob("*.py"):
        found = set()
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "benchmarks":
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("benchmarks."):
                found.add(node.module.split(".")[1])
            elif isinstance(node, ast.Import):
                found.update(a.name.split(".")[1] for a in node.names if a.name.startswith("benchmarks."))
        graph[source.stem] = found & {p.stem for p in BENCHMARKS.glob("*.py")}
    return graph


def circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` as a path that ends where it starts, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt, path + [nxt])):
                return found
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start, [start])):
            return found
    return None


def test_the_finder_finds_a_circle():
    assert circle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert circle({"a": {"b"}, "b": set()}) is None


def test_the_benchmarks_package_has_no_import_circle():
    graph = imports()
    assert "suite" in graph["__main__"] and "common" in graph["credit_arena"]  # the scan sees imports
    assert circle(graph) is None, " -> ".join(circle(graph) or [])
    assert not graph["common"], "benchmarks.common is the floor every benchmark stands on"

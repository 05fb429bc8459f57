"""The package's floors: every ``teamplay`` import runs down, and no two packages import each other.

Run as ``python -m tests.test_import_floors`` (prints the package graph) or through the test below it.
Every import counts, including those inside functions (a lazy import still ties two floors).
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "teamplay"

#: floor of each top-level module or package of teamplay; a module may import its own floor and below
FLOORS = {
    "errors": 0, "records": 0, "registry": 0, "hub": 0, "atomic": 0,
    "agents": 1,
    "envs": 2,
    "credit": 3,
    "config": 4,
    "training": 5,
    "distributed": 6, "federated": 6, "report": 6, "serving": 6,
    "cli": 7, "__main__": 7, "__init__": 7,
}


def unit_of(path: Path) -> str:
    """``teamplay/credit/shapley.py`` -> ``credit``; ``teamplay/config.py`` -> ``config``."""
    return path.relative_to(PACKAGE).parts[0].removesuffix(".py")


def imports_of(path: Path) -> set[str]:
    """The teamplay units ``path`` imports."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "teamplay" and len(parts) > 1:
                found.add(parts[1])
    return found


def graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = defaultdict(set)
    for path in PACKAGE.rglob("*.py"):
        unit = unit_of(path)
        edges[unit] |= imports_of(path) - {unit}
    return edges


def violations() -> list[str]:
    edges = graph()
    out = []
    for unit, targets in sorted(edges.items()):
        if unit not in FLOORS:
            out.append(f"teamplay/{unit} has no floor: add it to FLOORS in tests/test_import_floors.py")
            continue
        for target in sorted(targets):
            if target not in FLOORS:
                out.append(f"{unit} imports teamplay.{target}, which has no floor")
            elif FLOORS[target] > FLOORS[unit]:
                out.append(f"{unit} (floor {FLOORS[unit]}) imports {target} (floor {FLOORS[target]}): runs back up")
            elif unit in edges.get(target, set()):
                out.append(f"{unit} and {target} import each other")
    return out


def test_imports_only_run_down():
    assert violations() == []


if __name__ == "__main__":
    for unit, targets in sorted(graph().items(), key=lambda kv: FLOORS.get(kv[0], 99)):
        print(f"{FLOORS.get(unit, '?')} {unit:12s} -> {', '.join(sorted(targets)) or '-'}")
    problems = violations()
    print("\n".join(problems) or "no import runs back up; no two packages import each other")
    sys.exit(1 if problems else 0)

"""The package's floors: every ``teamplay`` import runs down, and no two packages import each other.

The same holds inside the packages split into rooms (``INNER_FLOORS``): a room (a sub-package, or a
module on the package's own floor) imports only rooms on its floor or below, and no two rooms import each other.

Run as ``python -m tests.test_import_floors`` (prints the package graph) or through the tests below it.
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
    "errors": 0, "records": 0, "registry": 0, "hub": 0, "atomic": 0, "json_files": 0,
    "agents": 1,
    "envs": 2,
    "credit": 3,
    "config": 4,
    "training": 5,
    "distributed": 6, "federated": 6, "report": 6, "serving": 6,
    "cli": 7, "__main__": 7, "__init__": 7,
}

#: floor of each room inside a package split into rooms (the key: its path under teamplay/); the
#: package's ``__init__`` sits on top, as it imports the rooms to register what they hold
INNER_FLOORS = {
    "credit": {
        "values": 0,  # group normalisation, Shapley values, v(S), coverage, process scores, replay queries
        "registry": 1,  # the one signature every method has
        "methods": 2, "token": 2,  # the message-level and the token-level methods
        "audit": 3,  # cards, fidelity, the COSAC bandit: checks on the methods
        "__init__": 4,
    },
    "config": {
        "base": 0, "loader": 0,  # the sections' base model; reading YAML and --set into any model
        "deprecated": 0,  # renamed keys still read for one release
        # the sections, by what they configure
        "env": 1, "model": 1, "controllers": 1, "credit": 1, "learning": 1, "distributed": 1,
        "curriculum": 1,  # its stages override the task and protocol sections (env)
        "warm_start": 1,  # the warm start's section (its teacher check reads envs)
        "federated": 2,  # its extra_tasks are TaskConfigs
        "runs": 3,  # the configs of whole runs and the rules that read several sections
        "__init__": 4,
    },
    "envs/tasks": {
        "answers": 0,  # reading and checking an answer; knows no task
        "sources": 1,  # rows from a file or the hub
        "base": 2,  # the Task interface and the registry of names
        "catalog": 3,  # the built-in tasks
        "__init__": 4,
    },
    "envs/protocols": {
        "traits": 0,  # what a protocol may promise; knows no protocol
        "base": 1,  # the Protocol interface, turns, the reply-prefix type
        "verdicts": 2, "driver": 2, "yaml_protocol": 2,  # verdict helpers, the turn driver, YAML protocols
        "registry": 3,  # names and files -> protocols
        "catalog": 4,  # the built-in rule books
        "__init__": 5,
    },
    "training": {
        # the bottom three import no other room: what a run keeps on disk, the policy update, playing episodes
        "store": 0, "learn": 0, "play": 0,
        "wiring": 1,  # a run's parts built from its config, check_run
        "step": 2,  # one step's stages
        "run": 3,  # the trainer, its parts, run state, held-out evaluations
        "experiments": 4,  # sweeps, saved credit, controller training, the fidelity check
        "__init__": 5,
    },
    "training/run": {
        # what the rest stands on: the interfaces of the two parts and the optimiser, the data order
        # and step seeds, stopping at a signal, the difficulty dial
        "parts": 0, "data_order": 0, "preemption": 0, "curriculum": 0,
        "run_state": 1, "held_out": 1, "update_stage": 1, "warm_start": 1,  # what the trainer composes
        "asynchronous": 1,  # the generator thread, what it generates with, the asynchronous rollout source
        "local_parts": 2, "rollout_source": 2,  # the in-process parts; the one interface the step takes episodes from
        "sections": 2,  # the config cut into the settings of the parts above
        "step_stages": 2,  # the step's credit, token and update stages, built in one place
        "trainer": 3,
        "__init__": 0,  # imports nothing
    },
    "serving": {
        "files": 0, "episodes": 0,  # the team as exported files; requests -> episodes, batched
        "api": 1,  # the OpenAI-compatible server over the episodes
        "__init__": 2,
    },
    "cli": {
        "app": 0, "tables": 0,  # the Typer app, its error handling and shared options; the result tables
        "progress": 0,  # bars on a terminal, plain lines elsewhere
        "training": 1, "evaluation": 1, "deployment": 1, "inspection": 1,  # the commands, by family
        "sft": 1,  # the warm start alone
        "__init__": 2, "__main__": 3,
    },
}


def unit_of(path: Path) -> str:
    """``teamplay/credit/values/shapley.py`` -> ``credit``; ``teamplay/config.py`` -> ``config``."""
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


def rooms_imported(path: Path, package: str, rooms: dict[str, int]) -> set[str]:
    """The rooms of ``package`` (a path under teamplay/, e.g. ``envs/tasks``) that ``path`` imports.

    ``from teamplay.credit import methods`` names the room ``methods``; a name the package itself
    exports (``from teamplay.credit import CreditBatch``) comes from its ``__init__``.
    """
    dotted = "teamplay." + package.replace("/", ".")
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == dotted:
                found |= {a.name if a.name in rooms else "__init__" for a in node.names}
                continue
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            if name.startswith(dotted + "."):
                found.add(name[len(dotted) + 1:].split(".")[0])
    return found


def inner_graph(package: str) -> dict[str, set[str]]:
    """Room -> the other rooms of ``package`` it imports (``credit/values/shapley.py`` is in ``values``,
    ``credit/registry.py`` in ``registry``)."""
    root = PACKAGE / package
    rooms = INNER_FLOORS[package]
    edges: dict[str, set[str]] = defaultdict(set)
    for path in root.rglob("*.py"):
        room = path.relative_to(root).parts[0].removesuffix(".py")
        edges[room] |= rooms_imported(path, package, rooms) - {room}
    return edges


def check_floors(edges: dict[str, set[str]], floors: dict[str, int], where: str) -> list[str]:
    """Each unit imports only units on its floor or below, and no two units import each other."""
    out = []
    for unit, targets in sorted(edges.items()):
        if unit not in floors:
            out.append(f"{where}{unit} has no floor: add it to tests/test_import_floors.py")
            continue
        for target in sorted(targets):
            if target not in floors:
                out.append(f"{where}{unit} imports {where}{target}, which has no floor")
            elif floors[target] > floors[unit]:
                out.append(f"{where}{unit} (floor {floors[unit]}) imports {where}{target} (floor {floors[target]}): "
                           f"runs back up")
            elif unit in edges.get(target, set()):
                out.append(f"{where}{unit} and {where}{target} import each other")
    return out


def violations() -> list[str]:
    return check_floors(graph(), FLOORS, "teamplay/")


def inner_violations() -> list[str]:
    out = []
    for package, floors in INNER_FLOORS.items():
        out += check_floors(inner_graph(package), floors, f"teamplay/{package}/")
        rooms = {p.name.removesuffix(".py") for p in (PACKAGE / package).iterdir()
                 if p.suffix == ".py" or (p / "__init__.py").exists()}
        out += [f"teamplay/{package}/{room} has no floor: add it to INNER_FLOORS"
                for room in sorted(rooms - set(floors))]
    return out


def test_imports_only_run_down():
    assert violations() == []


def test_imports_inside_the_rooms_only_run_down():
    assert inner_violations() == []


def test_a_room_importing_upwards_is_caught():
    """The inner check is not vacuous: a values module importing a method is reported."""
    edges = {"values": {"methods"}, "methods": {"values"}}
    problems = check_floors(edges, INNER_FLOORS["credit"], "teamplay/credit/")
    assert problems == ["teamplay/credit/methods and teamplay/credit/values import each other",
                        "teamplay/credit/values (floor 0) imports teamplay/credit/methods (floor 2): runs back up"]


if __name__ == "__main__":
    for unit, targets in sorted(graph().items(), key=lambda kv: FLOORS.get(kv[0], 99)):
        print(f"{FLOORS.get(unit, '?')} {unit:12s} -> {', '.join(sorted(targets)) or '-'}")
    for package in INNER_FLOORS:
        floors = INNER_FLOORS[package]
        for room, targets in sorted(inner_graph(package).items(), key=lambda kv: floors.get(kv[0], 99)):
            print(f"  {floors.get(room, '?')} {package}/{room:10s} -> {', '.join(sorted(targets)) or '-'}")
    problems = violations() + inner_violations()
    print("\n".join(problems) or "no import runs back up; no two packages or rooms import each other")
    sys.exit(1 if problems else 0)

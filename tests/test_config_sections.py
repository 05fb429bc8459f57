"""Sections, not the whole config: outside the composition root and the CLI, no function of the
package takes a whole ``TrainConfig``; each takes the sections it reads (``UpdateSettings``,
``RunRecord``, ``HeldOutSettings``, a ``WarmStartConfig``, ...).

The composition root is the code whose job is to turn one whole config into a run's parts: the
``Trainer`` constructor and ``make_trainer`` (which picks its parts), the parts factories they call,
the wiring (``build_run`` and the checks of option combinations), the stages' builder, the cutting
of the config into the parts' settings, and ``check_fidelity`` (``teamplay credit --check``: a run
wired but not trained). Everything it builds gets sections.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "teamplay"

#: folders (under teamplay/) whose every function may take the whole config
ROOT_FOLDERS = (
    "cli",  # the commands read a config file and hand it on
    "training/wiring",  # build_run and the checks of option combinations
)
#: single functions of the composition root (module path under teamplay/, qualified name)
ROOT_FUNCTIONS = {
    ("training/run/trainer.py", "Trainer.__init__"), ("training/run/trainer.py", "Trainer._compose"),
    ("distributed/compose.py", "make_trainer"),
    # the parts factories: the runner and learner a config asks for
    ("training/run/parts.py", "PartsFactory.__call__"), ("training/run/local_parts.py", "LocalParts.__call__"),
    ("distributed/parts.py", "RayParts.__call__"),
    ("training/run/step_stages.py", "build_stages"),  # the step's three stages, in one function
    # the config cut into the settings of the parts that outlive the wiring
    ("training/run/sections.py", "update_settings"), ("training/run/sections.py", "run_record"),
    ("training/run/sections.py", "held_out_settings"),
    ("training/experiments/fidelity_check.py", "check_fidelity"),
}


def _whole_config(annotation: ast.expr | None) -> bool:
    """Whether a parameter's annotation is ``TrainConfig`` (or ``TrainConfig | None``), not a section,
    a class of configs or a callable that receives one."""
    if annotation is None:
        return False
    text = ast.unparse(annotation).replace(" ", "").strip("'\"")
    return text in ("TrainConfig", "TrainConfig|None", "Optional[TrainConfig]")


def takers_of_the_whole_config() -> list[tuple[str, str]]:
    """(module path under teamplay/, qualified name) of every function with a parameter annotated
    ``TrainConfig``, or with an unannotated parameter named ``cfg`` (the name the package gives it)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))

        def visit(node: ast.AST, prefix: str) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.ClassDef):
                    visit(child, f"{prefix}{child.name}.")
                elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    args = child.args.posonlyargs + child.args.args + child.args.kwonlyargs
                    if any(_whole_config(a.annotation) or (a.arg == "cfg" and a.annotation is None) for a in args):
                        found.append((rel, f"{prefix}{child.name}"))  # noqa: B023 (rel is this file's)
                    visit(child, f"{prefix}{child.name}.")

        visit(tree, "")
    return found


def test_only_the_composition_root_and_the_cli_take_the_whole_config():
    outside = [f"{rel}: {name}" for rel, name in takers_of_the_whole_config()
               if not rel.startswith(tuple(f + "/" for f in ROOT_FOLDERS)) and (rel, name) not in ROOT_FUNCTIONS]
    assert outside == [], ("these take the whole TrainConfig; give them the sections they read "
                           "(teamplay.training.run.sections) or name them as composition: " + ", ".join(outside))


def test_the_scan_sees_what_it_should():
    # the scan is not vacuous: the composition root's own functions are found where they are
    found = set(takers_of_the_whole_config())
    assert ROOT_FUNCTIONS <= found, f"named as composition but not found (renamed?): {sorted(ROOT_FUNCTIONS - found)}"
    assert ("training/wiring/wired_run.py", "build_run") in found

"""Every script in ``examples/`` runs as its docstring says (``python examples/NAME.py``), in this
process; the training loop with a tiny random model (``tests/tiny.py``) in place of the embedded one.
Each script checks its own numbers with ``assert``."""

from __future__ import annotations

import ast
import runpy
import sys
from pathlib import Path

import pytest

from tests.tiny import save_tiny

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SCRIPTS = sorted(EXAMPLES.glob("*.py"))


def run_script(path: Path, *args: str) -> None:
    argv = sys.argv
    sys.argv = [str(path), *args]
    try:
        runpy.run_path(str(path), run_name="__main__")
    finally:
        sys.argv = argv


def test_the_examples_are_found():
    assert {p.name for p in SCRIPTS} == {"custom_protocol.py", "custom_credit.py", "custom_task.py", "train_loop.py"}


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_each_example_says_what_it_shows_and_how_to_run_it(path):
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    assert "What it shows" in doc and f"python examples/{path.name}" in doc


@pytest.mark.parametrize("name", ["custom_protocol.py", "custom_credit.py", "custom_task.py"])
def test_example_runs(name, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    run_script(EXAMPLES / name)
    assert capsys.readouterr().out.strip()


def test_training_loop_example_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    model = save_tiny(tmp_path / "tiny")
    run_script(EXAMPLES / "train_loop.py", "--model", str(model), "--steps", "1", "--max-new-tokens", "4")
    out = capsys.readouterr().out
    assert "step 1: reward" in out

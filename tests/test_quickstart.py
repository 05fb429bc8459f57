"""The README's Quick start runs as written: every command of its code block, in order, in a fresh
folder, with the tiny random model (``tests/tiny.py``) standing in for ``smollm2-135m`` and model
runs shortened as the docs pages' are (``tests.docs.test_tutorials.run_command``). Its credit
command says why every advantage is 0 when it is: the tiny model's noise is wrong on every problem,
so every group's rewards are equal and nothing can be credited."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from teamplay.cli import app
from tests.docs.test_tutorials import blocks, commands, run_command
from tests.tiny import save_tiny

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def quick_start() -> list[list[str]]:
    """The commands of the first ``bash`` block of the README's "Quick start" section."""
    text = README.read_text(encoding="utf-8")
    start = text.index("\n## Quick start\n")
    end = text.index("\n## ", start + 1)
    first, last = text[:start].count("\n") + 1, text[:end].count("\n") + 1
    [block] = [b for b in blocks(README) if first <= b.line <= last and b.lang == "bash"][:1]
    return commands(block.body)


def test_the_quick_start_shows_a_model_on_a_task_it_sometimes_solves():
    quick = quick_start()
    model_runs = [args for args in quick if "smollm2-135m" in args and args[1] in ("play", "eval")]
    assert model_runs, "the quick start runs the embedded model"
    for args in model_runs:  # sampled, short answers, sums the untrained model gets right now and then
        assert "--temperature" in args and float(args[args.index("--temperature") + 1]) > 0
        assert "task.options.max_operand=12" in args and "--max-new-tokens" in args
    [evaluation] = [args for args in model_runs if args[1] == "eval"]
    # several samples a problem: the groups credit compares
    assert int(evaluation[evaluation.index("--samples") + 1]) >= 2
    assert int(evaluation[evaluation.index("--limit") + 1]) <= 8


@pytest.mark.slow
def test_the_readme_quick_start_runs_as_written(tmp_path, monkeypatch):
    tiny = str(save_tiny(tmp_path / "tiny"))
    work = tmp_path / "work"
    work.mkdir()
    (work / "configs").symlink_to(ROOT / "configs", target_is_directory=True)
    monkeypatch.chdir(work)
    credited = []
    for args in quick_start():
        assert args[0] == "teamplay", args
        if args[1] == "credit":  # no model: run as written, its output read below
            result = CliRunner().invoke(app, args[1:], catch_exceptions=False)
            assert result.exit_code == 0, result.output
            credited.append(" ".join(result.output.split()))
        else:
            run_command(args, tiny, f"README.md: {' '.join(args)}")
    assert credited, "the quick start credits its evaluation"
    for output in credited:
        # the tiny model's noise is wrong everywhere: every advantage is 0, and the output says why
        assert re.search(r"[+-]0\.000", output)
        assert "every advantage is 0: in every one of the" in output
        assert "all episodes got the same reward" in output and "--temperature" in output

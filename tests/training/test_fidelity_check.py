"""``teamplay credit --check``: each named method's agreement with the true advantage on the
user's own team and task, through the trainer's credit stage (tiny model, a user task)."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from teamplay.cli import app
from teamplay.config import TrainConfig, build_config
from teamplay.training.experiments.fidelity_check import check_fidelity
from tests.test_counterfactual_cli import LOWER_TASK
from tests.tiny import save_tiny, tiny_train_config

runner = CliRunner()


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    folder = tmp_path_factory.mktemp("check")
    (folder / "lower.py").write_text(LOWER_TASK)
    data = tiny_train_config(save_tiny(folder / "model"), folder / "run", task_name=f"{folder / 'lower.py'}:LowerTask",
                             protocol={"name": "sequential", "options": {"n_agents": 2}},
                             sampling={"max_new_tokens": 2, "temperature": 1.0})
    path = folder / "train.json"
    path.write_text(json.dumps(data))
    return path, data


@pytest.mark.slow  # a tiny model plays 3 problems x 4 episodes, then 4 re-executions per prefix
def test_every_method_is_measured_on_the_same_spoken_messages(config):
    _, data = config
    rows, oracle_tokens = check_fidelity(build_config(TrainConfig, data), ["grpo", "continuation"], problems=3,
                                         group=4, samples=4)
    assert [r.method for r in rows] == ["grpo", "continuation"]
    assert oracle_tokens > 0  # the true advantage was estimated by generating continuations
    for r in rows:
        assert r.fit.n == 3 * 4 * 2  # every spoken message of the 12 two-agent episodes
        assert r.groups <= 3
        assert math.isnan(r.fit.pearson) or -1.0 <= r.fit.pearson <= 1.0
    assert rows[0].counterfactual_tokens == 0  # grpo re-executes nothing


@pytest.mark.slow  # the same on the command line: 2 problems x 2 episodes, 2 re-executions per prefix
def test_the_command_prints_the_pooled_and_the_within_group_correlation(config, monkeypatch):
    from teamplay.cli.app import console

    monkeypatch.setattr(console, "width", 240)  # wide enough that no header wraps
    path, _ = config
    result = runner.invoke(app, ["credit", "--check", "grpo", "--config", str(path), "--problems", "2", "--group",
                                 "2", "--samples", "2"])
    assert result.exit_code == 0, result.output
    assert "Pearson r [95% CI]" in result.output and "within-group r [95% CI]" in result.output
    assert "grpo" in result.output


def test_check_refuses_bad_input_with_one_line(config):
    path, _ = config
    result = runner.invoke(app, ["credit", "--check", "grpo,nope", "--config", str(path)])
    assert result.exit_code == 2 and result.output.strip().startswith("error:") and "nope" in result.output
    assert len(result.output.strip().splitlines()) == 1
    result = runner.invoke(app, ["credit", "--check", "grpo"])
    assert result.exit_code == 2 and "needs --config" in result.output
    result = runner.invoke(app, ["credit", "--check", "cosac", "--config", str(path), "--problems", "0"])
    assert result.exit_code == 2 and "must be >= 1" in result.output


@pytest.mark.parametrize("fails", [False, True])
def test_the_check_closes_the_backend_it_built(config, monkeypatch, fails):
    from teamplay.agents.backends.hf import HFBackend
    from teamplay.training.play.prefix_values import PrefixValues

    closed = []
    monkeypatch.setattr(HFBackend, "close", lambda self: closed.append(self))
    if fails:  # an error half-way (after the rollouts) must not leave the backend open
        def broken(self, episodes, items):
            raise RuntimeError("oracle failed")
        monkeypatch.setattr(PrefixValues, "values", broken)
    _, data = config
    cfg = build_config(TrainConfig, data)
    if fails:
        with pytest.raises(RuntimeError, match="oracle failed"):
            check_fidelity(cfg, ["grpo"], problems=1, group=2, samples=1)
    else:
        rows, _ = check_fidelity(cfg, ["grpo"], problems=1, group=2, samples=1)
        assert [r.method for r in rows] == ["grpo"]
    assert len(closed) == 1 and isinstance(closed[0], HFBackend)

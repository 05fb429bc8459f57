"""A sweep over a config with ``distributed:`` trains each run on Ray (rollout workers and a learner
rank), as ``teamplay train`` does: both build their trainer through ``make_trainer``. Before the
composition root, a sweep trained such a config in one process and ignored the section."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from teamplay.cli import app
from teamplay.training.experiments.sweep import load_sweep
from tests.training.test_sweep import sweep_config

pytest.importorskip("ray")
runner = CliRunner()


@pytest.mark.slow  # about 30 s: one 1-step run with a rollout worker and a learner rank
def test_a_sequential_sweep_over_a_distributed_config_trains_on_ray(ray_cluster, tmp_path):
    config = sweep_config(tmp_path)
    data = json.loads(config.read_text())
    data["distributed"] = {"address": ray_cluster, "rollout_workers": 1, "learner_workers": 1}
    data["eval_task"]["limit"] = 1
    config.write_text(json.dumps(data))
    out = tmp_path / "sweep"
    result = runner.invoke(app, ["sweep", "-c", str(config), "--seeds", "0", "--steps", "1", "-o", str(out)],
                           catch_exceptions=False)
    assert result.exit_code == 0, result.output
    [run] = load_sweep(out).runs
    lines = [json.loads(line) for line in (out / "runs" / run.name / "metrics.jsonl").read_text().splitlines()]
    [step] = [line for line in lines if line["step"] == 1 and "reward_mean" in line]
    # what only the Ray runner reports: the episodes the workers produced and the adapter versions
    assert step["rollout_episodes"] == 4  # 2 problems x 2 episodes, all from the worker pool
    assert step["rollout_weights_version"] == [0] and step["rollout_restarts"] == 0


@pytest.mark.slow  # about 30 s: one 1-step run on Ray with a task from a user's file
def test_a_task_from_a_users_file_reaches_the_rollout_workers(ray_cluster, tmp_path):
    # the file is imported in the driver only, under a module name no worker can import: Ray must
    # ship its classes by value (before, the workers failed with ModuleNotFoundError)
    from teamplay.config import TrainConfig, build_config
    from teamplay.distributed.compose import make_trainer
    from tests.federated.fakes import FRACTIONAL_TASK

    data = json.loads(sweep_config(tmp_path).read_text())
    data.update(task={"name": FRACTIONAL_TASK, "split": "train", "limit": 4}, eval_task=None, steps=1,
                output_dir=str(tmp_path / "run"),
                distributed={"address": ray_cluster, "rollout_workers": 1, "learner_workers": 1})
    [step] = make_trainer(build_config(TrainConfig, data)).train().history
    assert step["rollout_episodes"] == 4 and 0 < step["reward_mean"] < 1

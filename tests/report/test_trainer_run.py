"""The report of a real (tiny) training run: whatever the trainer writes, the report reads.

This guards the contract between teamplay/training (metrics.jsonl, episodes.jsonl, config.yaml)
and teamplay/report against drift: the fake folders of the other tests are written by hand.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from teamplay.agents.backends.hf import HFBackend
from teamplay.config import TrainConfig, build_config
from teamplay.envs.protocols import get_protocol
from teamplay.envs.team_env import TeamEnv
from teamplay.report import RunData, load_folder, report_command
from teamplay.training.run.trainer import Trainer
from tests.training.fixtures import FirstTokenTask, tiny_team_model


@pytest.mark.slow  # about 40 s on two CPU cores: a tiny model, 2 steps of 32 episodes, 2 evaluations
def test_report_of_a_real_two_step_proposer_reviewer_run(tmp_path: Path) -> None:
    task = FirstTokenTask("abcdefghijklmnopqrstuvwxyz")  # reward: the first token is a lower-case letter
    cfg = build_config(TrainConfig, {
        "steps": 2, "protocol": {"name": "proposer_reviewer"}, "credit": {"method": "grpo"},
        # 4 groups of 8 a step: a group of this tiny model's replies starts with a letter about 1 time in
        # 8, so 2 groups of 4 are often all wrong (nothing credited); 8 groups of 8 leave that ~2e-4
        "rollout": {"problems_per_step": 4, "group_size": 8},
        "sampling": {"max_new_tokens": 2, "temperature": 1.0}, "eval_sampling": {"max_new_tokens": 2},
        "optim": {"lr": 0.01, "minibatch_size": 64}, "log_episodes": 3,
        "output_dir": str(tmp_path / "run"), "tensorboard": False, "checkpoint_every": 100,
    })
    team = TeamEnv(task, get_protocol("proposer_reviewer"), None).team
    model = tiny_team_model(team)
    trainer = Trainer(cfg, team_model=model, backend=HFBackend(model, max_prompt_tokens=1024), task=task,
                      items=task.load("train", limit=4), eval_items=task.load("test", limit=2))
    trainer.train()

    run = load_folder(tmp_path / "run")
    assert isinstance(run, RunData)
    assert [s.step for s in run.steps] == [1, 2]
    assert [(h.step, h.final) for h in run.heldout] == [(0, False), (2, True)]
    assert run.config["protocol"]["name"] == "proposer_reviewer"
    assert run.episodes, "seeded run: some groups have unequal rewards, so some episodes are credited"
    for logged in run.episodes:  # only credited episodes are logged, each with one advantage per message
        assert len(logged.advantages) == len(logged.episode.messages) > 0
    page = report_command([tmp_path / "run"], compare=False, output=None)
    html = page.read_text(encoding="utf-8")
    assert html.count('<article class="episode"') == len(run.episodes)
    assert (page.parent / "reward.png").is_file() and (page.parent / "heldout.png").is_file()

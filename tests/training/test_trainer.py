"""Trainer tests on a tiny random model: learning, what changes, exact resume, clipping, robustness."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from teamplay.agents.backends.hf import HFBackend
from teamplay.agents.roles import Role, Team
from teamplay.config import TrainConfig, build_config
from teamplay.errors import ConfigError
from teamplay.training.learn.nonfinite import NonFiniteWarning
from teamplay.training.run.trainer import Trainer
from tests.training.fixtures import ConstantTask, FirstTokenTask, tiny_team_model

LETTERS = "abcdefghijklmnopqrstuvwxyz"
REPO = Path(__file__).resolve().parents[2]


def make_trainer(tmp_path: Path, overrides: dict, team: Team | None = None, task=None,
                 protocol: str = "single", **trainer_kwargs) -> Trainer:
    """A Trainer of the tiny model on a first-token task; ``trainer_kwargs`` go to ``Trainer``
    (``parts``, ``group_hook``, ...)."""
    task = task or FirstTokenTask(LETTERS)
    data = {
        "steps": 4, "protocol": {"name": protocol},
        "rollout": {"problems_per_step": 4, "group_size": 8},
        "sampling": {"max_new_tokens": 2, "temperature": 1.0},
        "optim": {"lr": 0.01, "minibatch_size": 64},
        "output_dir": str(tmp_path / "run"), "tensorboard": False, "checkpoint_every": 100,
    }
    for key, value in overrides.items():
        data[key] = {**data[key], **value} if isinstance(value, dict) and key in data else value
    if team is not None:
        data["team"] = team.model_dump()
    cfg = build_config(TrainConfig, data)
    from teamplay.envs.protocols import get_protocol
    from teamplay.envs.team_env import TeamEnv

    resolved = TeamEnv(task, get_protocol(protocol, **cfg.protocol.options), team).team
    tm = tiny_team_model(resolved)
    return Trainer(cfg, team_model=tm, backend=HFBackend(tm, max_prompt_tokens=1024), task=task,
                   items=task.load("train", limit=8), **trainer_kwargs)


@pytest.mark.parametrize("objective", ["grpo", "gspo"])
def test_mean_reward_rises(tmp_path, objective):
    # Reward: the first generated token is a lower-case letter (26 of 260 byte tokens, about 10%
    # at the start). 12 steps of 32 episodes must lift the mean reward clearly.
    trainer = make_trainer(tmp_path, {"steps": 12, "objective": {"name": objective}})
    history = trainer.train().history
    rewards = [h["reward_mean"] for h in history]
    first, last = np.mean(rewards[:3]), np.mean(rewards[-3:])
    assert first < 0.4
    assert last > 0.8, rewards
    assert last - first > 0.4, rewards


def test_trainable_adapters_change_frozen_and_base_do_not(tmp_path):
    team = Team(roles=(Role(name="proposer"), Role(name="reviewer", trainable=False)))
    trainer = make_trainer(tmp_path, {"steps": 3, "protocol": {"options": {"rounds": 2}}},
                           team=team, protocol="proposer_reviewer")
    model = trainer.team_model.model
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer.train()
    # exact: a weight no update touches keeps its bits
    changed = {n for n, p in model.named_parameters() if not torch.equal(before[n], p.detach())}
    proposer = {n for n in before if ".lora_" in n and ".proposer." in n}
    # LoRA A of the proposer may stay put in the first step (B starts at 0, so A gets no gradient
    # until B moves), but after 3 steps every proposer tensor must have moved.
    assert proposer and proposer <= changed
    assert all(".proposer." in n for n in changed), sorted(changed - proposer)[:5]


def test_gspo_second_epoch_clips(tmp_path):
    # One minibatch per epoch: in epoch 1 the current weights ARE the behaviour weights (ratio 1,
    # nothing clipped); after that step the ratio moves, and with GSPO's 3e-4/4e-4 clip range
    # some sequences leave it in epoch 2.
    trainer = make_trainer(tmp_path, {"steps": 2, "objective": {"name": "gspo", "clip_low": 3e-4,
                                                                "clip_high": 4e-4},
                                      "optim": {"epochs": 2, "minibatch_size": 1000}})
    history = trainer.train().history
    assert all(h["clip_fraction_epoch1"] == 0.0 for h in history)
    assert all(h["clip_fraction_epoch2"] > 0.0 for h in history)


def test_zero_variance_groups_give_no_gradient(tmp_path):
    trainer = make_trainer(tmp_path, {"steps": 2}, task=ConstantTask(LETTERS))
    before = [p.detach().clone() for p in trainer.team_model.trainable_parameters()]
    history = trainer.train().history
    assert all(h["zero_variance_groups"] == h["groups"] == 4 for h in history)
    assert all(h["optimizer_steps"] == 0 and h["samples"] == 0 for h in history)
    after = trainer.team_model.trainable_parameters()
    # exact: a weight no update touches keeps its bits
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))


def test_nonfinite_loss_is_skipped_not_applied(tmp_path, monkeypatch):
    trainer = make_trainer(tmp_path, {"steps": 1})
    real = trainer.team_model.completion_logprobs

    def poisoned(*args, **kwargs):
        logp, mask = real(*args, **kwargs)
        return logp * float("nan"), mask

    monkeypatch.setattr(trainer.team_model, "completion_logprobs", poisoned)
    before = [p.detach().clone() for p in trainer.team_model.trainable_parameters()]
    with pytest.warns(NonFiniteWarning, match="step 1: skipped 1 of 1 optimiser steps: non-finite loss"):
        [metrics] = trainer.train().history
    assert metrics["skipped_nonfinite_steps"] == 1 and metrics["optimizer_steps"] == 0
    after = trainer.team_model.trainable_parameters()
    # exact: a weight no update touches keeps its bits
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))


def test_alternating_roles_train_one_adapter_per_phase(tmp_path):
    team = Team(roles=(Role(name="proposer"), Role(name="reviewer")))
    trainer = make_trainer(tmp_path, {"steps": 2, "alternate_roles_every": 1,
                                      "protocol": {"options": {"rounds": 2}}},
                           team=team, protocol="proposer_reviewer")
    history = trainer.train().history
    assert [h["trained_adapters"] for h in history] == [["proposer"], ["reviewer"]]


def test_training_refuses_greedy_groups_and_truncated_sampling(tmp_path):
    with pytest.raises(ConfigError, match="sampling.temperature"):
        make_trainer(tmp_path, {"sampling": {"temperature": 0.0}})
    with pytest.raises(ConfigError, match="top_p"):
        make_trainer(tmp_path, {"sampling": {"top_p": 0.9}})


RESUME_SCRIPT = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, {repo!r})
    from tests.training.test_trainer import make_trainer
    from pathlib import Path
    kill_after = int(os.environ.get("KILL_AFTER", "0"))
    trainer = make_trainer(Path(sys.argv[1]), {{"steps": 4, "checkpoint_every": 1}})
    def on_step(step, metrics):
        if step == kill_after:
            os.kill(os.getpid(), signal.SIGKILL)   # no cleanup, no final checkpoint
    trainer.on_step = on_step
    trainer.train(resume="auto")
""")


def _run(script: Path, folder: Path, kill_after: int = 0) -> subprocess.CompletedProcess:
    env = {**os.environ, "KILL_AFTER": str(kill_after), "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, str(script), str(folder)], env=env, capture_output=True,
                          text=True, timeout=300)


def _adapter_weights(run: Path) -> dict[str, torch.Tensor]:
    adapters = run / "checkpoints" / "step-000004" / "adapters"
    out = {}
    for sub in sorted(p for p in adapters.iterdir() if p.is_dir()):
        for key, value in load_file(sub / "adapter_model.safetensors").items():
            out[f"{sub.name}/{key}"] = value
    return out


@pytest.mark.slow
def test_resume_after_kill_matches_straight_run(tmp_path):
    script = tmp_path / "train_script.py"
    script.write_text(RESUME_SCRIPT.format(repo=str(REPO)))
    straight = _run(script, tmp_path / "straight")
    assert straight.returncode == 0, straight.stderr[-2000:]
    killed = _run(script, tmp_path / "resumed", kill_after=2)
    assert killed.returncode == -signal.SIGKILL
    ckpts = sorted(p.name for p in (tmp_path / "resumed" / "run" / "checkpoints").iterdir())
    assert ckpts == ["step-000001", "step-000002"]  # keep_checkpoints=2; nothing past the kill
    resumed = _run(script, tmp_path / "resumed")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    a, b = _adapter_weights(tmp_path / "straight" / "run"), _adapter_weights(tmp_path / "resumed" / "run")
    assert a.keys() == b.keys() and a
    worst = max(float((a[k] - b[k]).abs().max()) for k in a)
    assert worst <= 1e-6
    # the resumed run's metrics hold each step once, in order
    import json
    steps = [json.loads(line)["step"] for line in
             (tmp_path / "resumed" / "run" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]

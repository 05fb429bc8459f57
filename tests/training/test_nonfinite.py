"""Numbers that go bad in training (``teamplay.training.learn.nonfinite``): a non-finite loss or gradient is
skipped with one warning and never reaches the adapters; too many in a row stop the run before it
checkpoints, and the last checkpoint holds the last finite adapters."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from pydantic import BaseModel

from teamplay.agents.roles import Role, Team
from teamplay.config import TrainConfig, build_config
from teamplay.credit import CreditOutputError, register_credit
from teamplay.errors import ConfigError, TeamplayError
from teamplay.records import TaskItem
from teamplay.training.learn.nonfinite import MAX_ADVANTAGE, NonFiniteError, NonFiniteWarning
from teamplay.training.store.checkpoint import list_checkpoints
from tests.training.fixtures import FirstTokenTask
from tests.training.test_trainer import make_trainer

NAN = float("nan")


class EvenByteTask(FirstTokenTask):
    """Reward 1 when the first character's code point is even: about half of the tiny random model's
    episodes, so a group of 8 nearly always has reward variance (and samples to update on)."""

    def score(self, completion: str, item: TaskItem) -> float:
        return float(bool(completion) and ord(completion[0]) % 2 == 0)


SMALL = {"rollout": {"problems_per_step": 2, "group_size": 8}}


def small_trainer(tmp_path: Path, overrides: dict, **kwargs):
    return make_trainer(tmp_path, {**SMALL, **overrides}, task=EvenByteTask(""), **kwargs)


def snapshot(trainer) -> dict[str, list[torch.Tensor]]:
    return {a: [p.detach().clone() for p in ps] for a, ps in trainer.learner.params.items()}


def same(a: dict[str, list[torch.Tensor]], b: dict[str, list[torch.Tensor]]) -> bool:
    # exact: a skipped step leaves the weights' bits as they were
    return a.keys() == b.keys() and all(torch.equal(x, y) for k in a for x, y in zip(a[k], b[k], strict=True))


def poison(monkeypatch, trainer, when=lambda adapter: True, grad: bool = False) -> None:
    """Make the update's log-probs NaN (``grad=False``: the loss is NaN) or leave them finite with a
    NaN gradient (``grad=True``: the loss is finite, the gradient norm is not), for the adapters
    ``when`` picks."""
    real = trainer.team_model.completion_logprobs

    def poisoned(*args, **kwargs):
        logp, mask = real(*args, **kwargs)
        if not logp.requires_grad or not when(kwargs.get("adapter")):
            return logp, mask
        if grad:
            logp.register_hook(lambda g: g * NAN)
            return logp, mask
        return logp * NAN, mask

    monkeypatch.setattr(trainer.team_model, "completion_logprobs", poisoned)


def test_a_nonfinite_loss_is_skipped_with_one_warning_and_recorded(tmp_path, monkeypatch):
    trainer = small_trainer(tmp_path, {"steps": 1})
    poison(monkeypatch, trainer)
    before = snapshot(trainer)
    with pytest.warns(NonFiniteWarning) as caught:
        [metrics] = trainer.train().history
    [warning] = [str(w.message) for w in caught if issubclass(w.category, NonFiniteWarning)]
    [adapter] = trainer.trainable
    assert warning.startswith(f"step 1: skipped 1 of 1 optimiser steps: non-finite loss of adapter {adapter!r} "
                              "(epoch 1, minibatch 1)"), warning
    assert warning.endswith("(1 such step in a row; the run stops at optim.max_nonfinite_steps = 3)"), warning
    assert same(snapshot(trainer), before)  # nothing reached the adapters
    assert metrics["skipped_nonfinite_steps"] == 1 and metrics["optimizer_steps"] == 0
    assert metrics["nonfinite_skips"] == [{"epoch": 1, "minibatch": 1, "quantity": "loss", "adapters": [adapter]}]
    assert metrics["nonfinite_streak"] == 1
    logged = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[-1])
    assert logged["skipped_nonfinite_steps"] == 1 and logged["nonfinite_skips"] == metrics["nonfinite_skips"]


def test_a_nonfinite_gradient_names_the_adapter_and_changes_no_adapter(tmp_path, monkeypatch):
    # two adapters share each optimiser step; only the reviewer's gradient is NaN (its loss is finite)
    team = Team(roles=(Role(name="proposer"), Role(name="reviewer")))
    trainer = small_trainer(tmp_path, {"steps": 1, "protocol": {"options": {"rounds": 2}}},
                            team=team, protocol="proposer_reviewer")
    poison(monkeypatch, trainer, when=lambda adapter: adapter == "reviewer", grad=True)
    before = snapshot(trainer)
    with pytest.warns(NonFiniteWarning, match=r"step 1: .*non-finite gradient norm of adapter 'reviewer' "
                                              r"\(epoch 1, minibatch 1\)"):
        [metrics] = trainer.train().history
    assert math.isfinite(metrics["loss"])  # the loss was fine: the gradient is what went bad
    assert metrics["nonfinite_skips"] == [{"epoch": 1, "minibatch": 1, "quantity": "gradient norm",
                                           "adapters": ["reviewer"]}]
    assert same(snapshot(trainer), before)  # the proposer's finite gradient was not applied alone either


def test_consecutive_nonfinite_steps_stop_the_run_before_a_checkpoint(tmp_path, monkeypatch):
    # steps 1-2 learn; from step 3 every loss is NaN; max_nonfinite_steps=2 stops the run at step 4
    trainer = small_trainer(tmp_path, {"steps": 6, "checkpoint_every": 1, "keep_checkpoints": 5,
                                       "optim": {"max_nonfinite_steps": 2}})
    after_two: dict[str, list[torch.Tensor]] = {}
    trainer.on_step = lambda step, metrics: after_two.update(snapshot(trainer)) if step == 2 else None
    initial = snapshot(trainer)
    poison(monkeypatch, trainer, when=lambda adapter: trainer.state.step >= 2)
    with pytest.warns(NonFiniteWarning) as caught, pytest.raises(NonFiniteError) as stopped:
        trainer.train()
    assert isinstance(stopped.value, TeamplayError)  # the CLI's one error: line
    run = tmp_path / "run"
    message = str(stopped.value)
    assert message.startswith("step 4: 2 consecutive steps had a non-finite loss or gradient "
                              "(optim.max_nonfinite_steps = 2)"), message
    assert str(run / "checkpoints" / "step-000003") in message
    assert [str(w.message)[:7] for w in caught if issubclass(w.category, NonFiniteWarning)] == ["step 3:", "step 4:"]
    # the failing step is in the record, its checkpoint is not
    assert [p.name for p in list_checkpoints(run)] == ["step-000001", "step-000002", "step-000003"]
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [(m["step"], m["nonfinite_streak"], m["skipped_nonfinite_steps"]) for m in lines] == [
        (1, 0, 0), (2, 0, 0), (3, 1, 1), (4, 2, 1)]
    # the adapters at the stop are those of step 2 (steps 3-4 applied nothing), which did learn
    at_stop = snapshot(trainer)
    assert same(at_stop, after_two) and not same(at_stop, initial)
    # and the last checkpoint loads them back exactly
    with torch.no_grad():
        for p in trainer.team_model.trainable_parameters():
            p.add_(1.0)
    trainer.team_model.load_adapters(run / "checkpoints" / "step-000003" / "adapters")
    assert same(snapshot(trainer), after_two)


def test_a_step_that_learns_ends_the_streak(tmp_path, monkeypatch):
    # NaN in steps 1 and 3 only: never 2 in a row, so the run finishes
    # alternating +-1 advantages: every step has messages to update on, whatever the sampled rewards
    trainer = small_trainer(tmp_path, {"steps": 3, "optim": {"max_nonfinite_steps": 2},
                                       "credit": {"method": "test_alternating_advantage"}})
    poison(monkeypatch, trainer, when=lambda adapter: trainer.state.step in (0, 2))
    with pytest.warns(NonFiniteWarning):
        history = trainer.train().history
    assert [h["nonfinite_streak"] for h in history] == [1, 0, 1]
    assert history[1]["optimizer_steps"] == 1


def test_reward_and_advantage_ranges_are_logged(tmp_path):
    trainer = small_trainer(tmp_path, {"steps": 1})
    [metrics] = trainer.train().history
    assert (metrics["reward_min"], metrics["reward_max"]) == (0.0, 1.0)
    assert metrics["adv_min"] < 0 < metrics["adv_max"]  # grpo: centred within each group
    assert metrics["nonfinite_streak"] == 0 and "nonfinite_skips" not in metrics


def test_a_checkpoint_of_nonfinite_adapters_is_refused(tmp_path):
    trainer = small_trainer(tmp_path, {"steps": 1})
    with torch.no_grad():
        trainer.learner.params[trainer.trainable[0]][0][0, 0] = NAN
    with pytest.raises(NonFiniteError, match=f"checkpoint step 0: adapter {trainer.trainable[0]!r} holds "
                                             "non-finite weights"):
        trainer.checkpoint()
    assert not (tmp_path / "run" / "checkpoints").exists()


@pytest.mark.parametrize("value", [0, -1, "many"])
def test_max_nonfinite_steps_is_validated(value):
    with pytest.raises(ConfigError, match="optim.max_nonfinite_steps"):
        build_config(TrainConfig, {"optim": {"max_nonfinite_steps": value}})


class _NoOptions(BaseModel):
    pass


@register_credit("test_alternating_advantage", _NoOptions, "+1 and -1 by turns, whatever the rewards")
def _alternating(batch, options):
    return [np.where(np.arange(len(ep.messages)) % 2 == k % 2, 1.0, -1.0) for k, ep in enumerate(batch.episodes)]


@register_credit("test_absurd_advantage", _NoOptions, "finite advantages of absurd size (1e300)")
def _absurd(batch, options):
    return [np.full(len(ep.messages), 1e300) for ep in batch.episodes]


def test_advantages_of_absurd_size_stop_the_run_naming_the_method(tmp_path):
    # 1e300 is finite in float64 (so the non-finite check passes) but inf once cast to the float32 loss
    assert np.isfinite(1e300) and 1e300 > MAX_ADVANTAGE
    trainer = small_trainer(tmp_path, {"steps": 1, "credit": {"method": "test_absurd_advantage"}})
    with pytest.raises(CreditOutputError) as err:
        trainer.train()
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("credit method 'test_absurd_advantage' returned an advantage of absurd size "
                              "(1e+300 for message 0 of episode 0)"), message
    assert not (tmp_path / "run" / "checkpoints").exists()

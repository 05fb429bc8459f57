"""Counterfactual credit on real generation with the tiny model.

FirstTokenTask rewards a proposal whose first character is a lower-case letter (about 10% of the
byte tokens), so groups of proposer/reviewer episodes have reward variance and credit runs on
real episodes: replays generate with the current adapters, or with the base model for
removal=base_policy.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from teamplay.credit import CreditBatch, CreditResources
from teamplay.credit.methods.continuation import ContinuationOptions, boundaries, continuation_credit
from tests.training.test_trainer import make_trainer


@pytest.mark.slow
def test_base_policy_removal_trains_on_real_rollouts(tmp_path):
    # shapley value=replay with removal=base_policy: removed roles are played by the base model
    # (adapters off) in the replays; the step trains the adapters. The other counterfactual methods
    # train through `teamplay train` in tests/test_counterfactual_cli.py.
    trainer = make_trainer(tmp_path, {
        "steps": 2, "protocol": {"name": "proposer_reviewer", "options": {"rounds": 2}},
        "rollout": {"problems_per_step": 2, "group_size": 4},
        "credit": {"method": "shapley", "options": {"value": "replay", "removal": "base_policy"}}},
        protocol="proposer_reviewer")
    before = [p.detach().clone() for p in trainer.team_model.trainable_parameters()]
    history = trainer.train().history
    assert sum(h["samples"] for h in history) > 0, history  # credit ran on groups with signal
    assert sum(h["replay_tokens"] for h in history) > 0
    after = trainer.team_model.trainable_parameters()
    # exact: asserts a difference: the step moved the adapters
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))


@pytest.mark.slow
def test_continuation_sum_is_reward_minus_v0_on_real_episodes(tmp_path):
    # baseline=continuation estimates V(0) by k fresh episodes; the advantages of every episode
    # still telescope to R - V(0) exactly (mode mean_only: no scaling)
    trainer = make_trainer(tmp_path, {"protocol": {"name": "proposer_reviewer", "options": {"rounds": 3}},
                                      "credit": {"method": "continuation"}}, protocol="proposer_reviewer")
    from teamplay.training.play.rollout import RolloutJob

    items = trainer.items[:1]
    episodes = trainer.runner.run([RolloutJob(item=items[0], group_id="g")] * 3, seed=3)
    engine = trainer.credit.replay
    engine.begin_step(0, sum(ep.tokens for ep in episodes))
    options = ContinuationOptions(samples=2, baseline="continuation", mode="mean_only")
    batch = CreditBatch(tuple(episodes), items[0], trainer.task.score, trainer.task.extract,
                        CreditResources(replay=engine))
    adv = continuation_credit(batch, options)
    for ep, a in zip(episodes, adv, strict=True):
        v0 = next(d["value"] for d in engine.coalition_values(ep) if d["start"] == 0)
        assert len(boundaries(ep)) == sum(m.spoke for m in ep.messages)
        assert float(np.sum(a)) == pytest.approx(ep.reward - v0, abs=1e-9)


def test_oracle_baseline_samples_replay_through_the_trainer_step(tmp_path):
    # the additive oracle with baseline_samples on split, the tiny model's two solvers each answering
    # their own part of a 2-tuple: the trainer provides the replay resource because these options ask
    # for it, and counts the replays' generated tokens as the step's extra tokens (not trained on)
    from teamplay.envs.tasks.catalog.tuples import TupleTask
    from tests.training.fixtures import FirstTokenTask
    from tests.training.test_trainer import LETTERS

    M, problems, G, K = 3, 4, 8, 2
    trainer = make_trainer(tmp_path, {
        "steps": 1, "protocol": {"name": "split"}, "rollout": {"problems_per_step": problems, "group_size": G},
        "credit": {"method": "oracle", "options": {"form": "additive", "baseline_samples": M}}},
        task=TupleTask(FirstTokenTask(LETTERS), k=K), protocol="split")
    assert trainer.credit.replay is not None
    before = [p.detach().clone() for p in trainer.team_model.trainable_parameters()]
    metrics = trainer.step().metrics
    # one query per agent and group, each run M times from the question (nothing free to reuse)
    assert metrics["replay_queries"] == problems * K and metrics["replay_free_queries"] == 0
    assert metrics["replay_episodes"] == problems * K * M and metrics["replay_samples"] == M
    assert metrics["replay_tokens"] > 0
    # trained on the rollout's own messages only (the replays estimate baselines), and trained
    assert 0 < metrics["samples"] <= problems * G * K
    after = trainer.team_model.trainable_parameters()
    # exact: asserts a difference: the step moved the adapters
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))

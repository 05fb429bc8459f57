"""The zero-variance rule: a group is kept for an agent when that agent's advantages are not all
zero, not when the team rewards differ; ``grpo`` trains exactly as under the reward rule."""

from __future__ import annotations

import numpy as np
import torch

from teamplay.records import TaskItem
from teamplay.training.step.stages import GroupWork, informative, resolve_token_rows, with_samples
from tests.training.test_step_stages import _episode
from tests.training.test_trainer import make_trainer

ITEM = TaskItem(id="p", prompt="?", reference="1")


def _timeless(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if "seconds" not in k and "time" not in k}


class RewardRule:
    """The rule before, as a stage in front of the credit stage: only groups whose team rewards
    differ are credited (everything else is the wrapped stage's)."""

    def __init__(self, credit) -> None:
        self.credit = credit

    def __call__(self, groups, ctx):
        return self.credit([g for g in groups if g.has_signal], ctx)

    def __getattr__(self, name):
        return getattr(self.credit, name)


def test_grpo_trains_exactly_as_under_the_reward_rule(tmp_path):
    new = make_trainer(tmp_path / "new", {"steps": 2})
    old = make_trainer(tmp_path / "old", {"steps": 2})
    old.credit = RewardRule(old.credit)
    for _ in range(2):
        a, b = new.step(), old.step()
        assert _timeless(a.metrics) == _timeless(b.metrics)
        assert 0 < a.metrics["zero_variance_groups"] < a.metrics["groups"]  # both kinds of group occurred
        assert [w.item.id for w in a.groups] == [w.item.id for w in b.groups]
        assert all(w.has_signal and not w.silent for w in a.groups)
    weights = [(n, p) for n, p in new.team_model.model.named_parameters() if "lora" in n]
    others = dict(old.team_model.model.named_parameters())
    # exact: both rules run the same minibatches: same ops, same kernels
    assert weights and all(torch.equal(p, others[n]) for n, p in weights)
    # exact: asserts a difference: it trained
    assert any(not torch.equal(p, torch.zeros_like(p)) for n, p in weights if "lora_B" in n)


def test_an_all_equal_group_is_kept_for_the_agent_a_method_credits():
    # rewards 0.5 and 0.5: broadcast gives no signal, but a per-agent method credits agent a
    equal = GroupWork((_episode("g1", "p", 0.5), _episode("g1", "p", 0.5)), ITEM, np.array([0.5, 0.5]),
                      advantages=(np.array([1.0, 0.0]), np.array([-1.0, 0.0])))
    nothing = GroupWork((_episode("g2", "p", 1.0), _episode("g2", "p", 1.0)), ITEM, np.array([1.0, 1.0]),
                        advantages=(np.zeros(2), np.zeros(2)))
    kept = informative([equal, nothing])
    assert len(kept) == 1 and not kept[0].has_signal and kept[0].silent == {"b_0"}
    samples = with_samples(kept, active={"a", "b"})[0].samples
    assert [(s.adapter, s.advantage) for s in samples] == [("a", 1.0), ("a", -1.0)]


def test_silent_agents_leave_the_token_rows_aligned():
    work = informative([GroupWork((_episode("g1", "p", 0.5), _episode("g1", "p", 0.5)), ITEM, np.array([0.5, 0.5]),
                                  advantages=(np.array([0.0, 2.0]), np.array([0.0, -2.0])))])
    groups = with_samples(work, active={"a", "b"})
    assert [s.adapter for s in groups[0].samples] == ["b", "b"]
    # the update resolved step sample 1: episode 1's message of b (a's messages made no samples)
    out = resolve_token_rows(groups, {1: (0.25, 0.75)}, active={"a", "b"})
    assert out[0].token_rows[0] == (None, None) and out[0].token_rows[1][0] is None
    np.testing.assert_array_equal(out[0].token_rows[1][1], [0.25, 0.75])  # exact: the resolved row, copied

"""The training step's stage records (``teamplay.training.step.stages``): what a step exposes per group
equals what the credit layer gives for those episodes, and the stages alone on hand-made records."""

from __future__ import annotations

import numpy as np
import pytest

from teamplay.credit import CreditBatch, CreditResources, assign
from teamplay.records import Episode, Message, TaskItem
from teamplay.training.learn.nonfinite import NonFiniteGuard
from teamplay.training.learn.samples import PolicySample, sample_positions
from teamplay.training.run.local_parts import LocalParts
from teamplay.training.run.update_stage import UpdateStage
from teamplay.training.step.stages import (
    GroupWork,
    StepContext,
    all_credited,
    make_groups,
    resolve_token_rows,
    with_samples,
)
from tests.training.test_trainer import make_trainer


def _scaling_hook(seen: list[tuple[str, np.ndarray]]):
    def hook(item: TaskItem, rewards: np.ndarray) -> float:
        seen.append((item.id, rewards.copy()))
        return 0.5 if len(seen) % 2 else 2.0  # groups 1, 3, ... halved; 2, 4, ... doubled
    return hook


def test_step_records_carry_the_credit_layers_advantages(tmp_path):
    seen: list[tuple[str, np.ndarray]] = []
    trainer = make_trainer(tmp_path, {"steps": 1, "credit": {"method": "grpo", "options": {"scale_rewards": "batch"}}},
                           group_hook=_scaling_hook(seen))
    result = trainer.step()
    # the hook saw every group (4 problems x 8 episodes), with signal or not, in order
    assert len(seen) == result.metrics["groups"] == 4
    step_rewards = np.concatenate([r for _, r in seen])  # [32]
    assert len(result.groups) == 4 - result.metrics["zero_variance_groups"] > 0
    scale_of = {item_id: 0.5 if k % 2 == 0 else 2.0 for k, (item_id, _) in enumerate(seen)}
    for work in result.groups:
        assert work.has_signal and work.scale == scale_of[work.item.id]
        assert all(ep.problem_id == work.item.id for ep in work.episodes) and len(work.episodes) == 8
        expected = assign("grpo", CreditBatch(episodes=work.episodes, item=work.item,
                                              resources=CreditResources(batch_rewards=tuple(step_rewards))),
                          trainer.credit.options)
        assert len(work.advantages) == len(expected) == 8
        for got, want, ep in zip(work.advantages, expected, work.episodes, strict=True):
            # exact: the credit stage computes this very product a * scale
            np.testing.assert_array_equal(got, want * work.scale)
            # by hand: one message per episode, A = scale * (r - group mean) / std of the step's 32 rewards
            hand = work.scale * (ep.reward - work.rewards.mean()) / step_rewards.std()
            np.testing.assert_allclose(got, [hand], rtol=1e-12)
        assert work.token_rows is None and work.batch is not None
        assert len(work.samples) == len(sample_positions(work.episodes, trainer.trainable))
        # exact: the advantage, copied
        assert [s.advantage for s in work.samples] == [float(a[0]) for a in work.advantages]
    # the flat views of StepResult are the records, in order
    assert result.credited == all_credited(result.groups)
    assert result.metrics["samples"] == sum(len(w.samples) for w in result.groups)


def test_the_update_stage_calls_the_learner_seam_with_every_sample(tmp_path):
    class CountingLearner:  # a stand-in Learner: records what the update stage hands it
        def __init__(self, inner) -> None:
            self.inner = inner  # the in-process learner, for everything but the update
            self.calls: list[tuple[list[PolicySample], int]] = []

        def update(self, samples, step):
            self.calls.append((list(samples), step))
            return {"optimizer_steps": 0, "loss": 0.25}

        def __getattr__(self, name):
            return getattr(self.inner, name)

    class CountingParts(LocalParts):  # the in-process parts with the stand-in learner
        def __call__(self, cfg, run, trainable):
            runner, inner = super().__call__(cfg, run, trainable)
            self.learner = CountingLearner(inner)
            return runner, self.learner

    parts = CountingParts()
    trainer = make_trainer(tmp_path, {"steps": 1}, parts=parts)
    learner = parts.learner
    assert trainer.learner is learner
    result = trainer.step()
    assert len(learner.calls) == 1
    samples, step = learner.calls[0]
    assert step == 0 and samples == [s for w in result.groups for s in w.samples] and samples
    # exact: the fake learner's constant
    assert result.metrics["optimizer_steps"] == 0 and result.metrics["loss"] == 0.25


def test_the_logged_lr_is_the_rate_the_update_used(tmp_path):
    # warm-up over 2 steps: step 1 updates at (0 + 1) / 2 of lr, step 2 at the full lr; the schedule
    # advances after each update, so a rate read after it would be the next step's
    trainer = make_trainer(tmp_path, {"steps": 3, "optim": {"warmup_steps": 2}})
    # exact: LambdaLR's base_lr * factor is this product
    assert [trainer.step().metrics["lr"] for _ in range(3)] == [0.01 * 0.5, 0.01, 0.01]


def test_the_update_stage_advances_the_schedule_after_a_step_without_samples():
    class NoSamplesLearner:  # a stand-in Learner: an update must not be asked for
        lr, resolved_tokens, ended = 0.5, {}, 0

        def update(self, samples, step):
            raise AssertionError("no samples: no update")

        def end_step(self):
            self.lr, self.ended = 0.25, self.ended + 1

    learner = NoSamplesLearner()
    stage = UpdateStage(learner, NonFiniteGuard(3))
    assert stage([], StepContext(4, frozenset({"a"}), ())) == []
    assert learner.ended == 1  # the schedule moved on all the same
    # exact: the fake learner's rate before it moved
    assert stage.metrics() == {"optimizer_steps": 0, "nonfinite_streak": 0, "lr": 0.5}


def _episode(group: str, problem: str, reward: float, roles=("a", "b")) -> Episode:
    messages = tuple(Message(agent=f"{r}_0", role=r, round=0, stage="solve", text="x", prompt_ids=(1,),
                             completion_ids=(2, 3), logprobs=(-0.5, -0.5), adapter=r) for r in roles)
    return Episode(problem_id=problem, group_id=group, agents=tuple(f"{r}_0" for r in roles), messages=messages,
                   final_answer="x", reward=reward)


def test_make_groups_keeps_order_and_asks_the_hook_for_every_group():
    items = {"p": TaskItem(id="p", prompt="?", reference="1"), "q": TaskItem(id="q", prompt="?", reference="2")}
    eps = [_episode("g1", "p", 1.0), _episode("g2", "q", 1.0), _episode("g1", "p", 0.0), _episode("g2", "q", 1.0)]
    asked = []
    groups = make_groups(eps, items, lambda item, r: asked.append((item.id, r.tolist())) or 3.0)
    assert asked == [("p", [1.0, 0.0]), ("q", [1.0, 1.0])]
    assert [g.episodes for g in groups] == [(eps[0], eps[2]), (eps[1], eps[3])]
    assert [g.has_signal for g in groups] == [True, False] and [g.scale for g in groups] == [3.0, 3.0]
    assert make_groups(eps, items)[0].scale == 1.0


def test_resolved_token_rows_land_in_their_own_group_and_message():
    item = TaskItem(id="p", prompt="?", reference="1")
    first = GroupWork((_episode("g1", "p", 1.0), _episode("g1", "p", 0.0)), item, np.array([1.0, 0.0]),
                      advantages=(np.array([1.0, 1.0]), np.array([-1.0, -1.0])))
    second = GroupWork((_episode("g2", "p", 0.0, roles=("a",)),), item, np.array([0.0]), advantages=(np.array([0.0]),))
    groups = with_samples([first, second], active={"a", "b"})
    assert [len(g.samples) for g in groups] == [4, 1]
    # the update resolved step samples 1 (group 1, episode 0, message 1) and 4 (group 2's only one);
    # sample 2 it never scored (keeps its scalar)
    out = resolve_token_rows(groups, {1: (0.5, 1.5), 4: (0.0, 0.0)}, active={"a", "b"})
    assert out[0].token_rows[0][0] is None and out[0].token_rows[1] == (None, None)
    np.testing.assert_array_equal(out[0].token_rows[0][1], [0.5, 1.5])  # exact: the resolved rows, copied
    np.testing.assert_array_equal(out[1].token_rows[0][0], [0.0, 0.0])  # exact: the resolved rows, copied
    # exact: the resolved rows, copied
    assert [s.token_advantages for g in out for s in g.samples] == [None, (0.5, 1.5), None, None, (0.0, 0.0)]
    with pytest.raises(ValueError):  # a record whose samples do not fit its episodes is refused
        resolve_token_rows([GroupWork(first.episodes, item, first.rewards, samples=groups[1].samples)], {}, {"a"})

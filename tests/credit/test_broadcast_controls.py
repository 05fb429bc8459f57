"""The broadcast baselines beside grpo (``dr_mas``: per-agent normalisation; ``raft``: right team
answers only) and the ``oracle`` controls (``mode: mean_only``, ``push_down: false``), each with a
worked example and an invariant."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from teamplay.credit import CreditBatch, assign
from teamplay.records import Episode, Message
from tests.credit.test_oracle import split_group

TEAM = ("a_0", "b_0")


def episode(reward: float, turns: list[tuple[str, bool]]) -> Episode:
    """An episode of team ``TEAM`` with messages (author, spoke) and team reward ``reward``."""
    messages = tuple(Message(agent=a, role=a[:-2], round=t, stage="say", text="x" if spoke else "", spoke=spoke)
                     for t, (a, spoke) in enumerate(turns))
    return Episode(problem_id="p", group_id="g", agents=TEAM, messages=messages, final_answer=None, reward=reward)


ONCE = [("a_0", True), ("b_0", True)]


@settings(max_examples=80, deadline=None)
@given(st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0]), min_size=1, max_size=8), st.sampled_from([0, 1]),
       st.sampled_from(["std", "mean_only"]))
def test_dr_mas_equals_grpo_when_every_agent_speaks_once(rewards, ddof, mode):
    batch = CreditBatch(episodes=tuple(episode(r, ONCE) for r in rewards))
    options = {"ddof": ddof, "mode": mode}
    for a, b in zip(assign("dr_mas", batch, options), assign("grpo", batch, options), strict=True):
        # exact: one call of group_advantage on the same G rewards, agent by agent
        assert a.tolist() == b.tolist()


def test_dr_mas_worked_numbers_with_a_skipped_turn():
    # b_0 skips in the last episode: a_0's samples are the rewards [1, 0, 0], b_0's only [1, 0]
    batch = CreditBatch(episodes=(episode(1.0, ONCE), episode(0.0, ONCE),
                                  episode(0.0, [("a_0", True), ("b_0", False)])))
    adv = assign("dr_mas", batch, {"mode": "mean_only"})
    # a_0: [1, 0, 0] - 1/3; b_0: [1, 0] - 1/2; the skipped turn 0
    np.testing.assert_allclose(np.concatenate(adv), [2 / 3, 0.5, -1 / 3, -0.5, -1 / 3, 0.0], rtol=0, atol=1e-15)
    grpo = assign("grpo", batch, {"mode": "mean_only"})
    # grpo's shared baseline 1/3 gives b_0 2/3 where its own baseline gives 1/2
    assert grpo[0][1] - adv[0][1] == pytest.approx(1 / 6, abs=1e-15)  # two roundings of thirds
    # mode std: b_0's two samples have std 1/2, so +-1; a_0's std sqrt(2)/3
    std = assign("dr_mas", batch, {})
    np.testing.assert_allclose([std[0][1], std[1][1]], [1.0, -1.0], rtol=0, atol=1e-15)
    np.testing.assert_allclose([std[0][0], std[1][0]], [(2 / 3) / (np.sqrt(2) / 3), -(1 / 3) / (np.sqrt(2) / 3)],
                               rtol=1e-14, atol=0)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0.0, 0.5, 1.0]), st.lists(st.tuples(st.sampled_from(TEAM), st.booleans()),
                                                                      min_size=1, max_size=4)),
                min_size=1, max_size=6))
def test_dr_mas_sums_to_zero_per_agent(cases):
    batch = CreditBatch(episodes=tuple(episode(r, turns) for r, turns in cases))
    adv = assign("dr_mas", batch, {"mode": "mean_only"})
    for agent in TEAM:
        total = sum(a for ep, row in zip(batch.episodes, adv, strict=True)
                    for m, a in zip(ep.messages, row, strict=True) if m.agent == agent)
        assert abs(total) <= 1e-12  # at most 24 samples in [-1, 1]: rounding far below this
    for ep, row in zip(batch.episodes, adv, strict=True):
        assert all(a == 0.0 for m, a in zip(ep.messages, row, strict=True) if not m.spoke)  # exact: set to 0


def test_raft_worked_numbers():
    skip_a = [("a_0", False), ("b_0", True)]
    batch = CreditBatch(episodes=(episode(1.0, ONCE), episode(0.0, ONCE), episode(1.0, skip_a)))
    assert [a.tolist() for a in assign("raft", batch)] == [[1.0, 1.0], [0.0, 0.0], [0.0, 1.0]]  # exact: 0/1
    # a lower threshold selects partial rewards too
    partial = CreditBatch(episodes=(episode(0.5, ONCE), episode(0.25, ONCE)))
    assert [a.tolist() for a in assign("raft", partial, {"threshold": 0.5})] == [[1.0, 1.0], [0.0, 0.0]]  # exact


def test_raft_best_of_group_worked_numbers():
    # a fractional team reward (split at K = 8 is never wholly right): the threshold selects nothing,
    # the reward ranking selects the group's best episodes, ties included
    batch = CreditBatch(episodes=(episode(0.25, ONCE), episode(0.5, ONCE), episode(0.5, ONCE), episode(0.0, ONCE)))
    assert [a.tolist() for a in assign("raft", batch)] == [[0.0, 0.0]] * 4  # exact: 0/1
    best = assign("raft", batch, {"select": "best"})
    assert [a.tolist() for a in best] == [[0.0, 0.0], [1.0, 1.0], [1.0, 1.0], [0.0, 0.0]]  # exact: 0/1
    nothing = CreditBatch(episodes=(episode(0.0, ONCE), episode(0.0, ONCE)))
    assert [a.tolist() for a in assign("raft", nothing, {"select": "best"})] == [[0.0, 0.0]] * 2  # exact


@settings(max_examples=80, deadline=None)
@given(st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0]), min_size=1, max_size=8))
def test_raft_best_selects_the_groups_top_reward(rewards):
    batch = CreditBatch(episodes=tuple(episode(r, ONCE) for r in rewards))
    adv = assign("raft", batch, {"select": "best"})
    top = max(rewards)
    assert [row.tolist() for row in adv] == [[1.0, 1.0] if top > 0 and r == top else [0.0, 0.0]  # exact: 0/1
                                             for r in rewards]


@settings(max_examples=80, deadline=None)
@given(st.lists(st.sampled_from([0.0, 1.0]), min_size=1, max_size=8))
def test_raft_selects_right_episodes_only(rewards):
    batch = CreditBatch(episodes=tuple(episode(r, ONCE) for r in rewards))
    adv = assign("raft", batch)
    # each episode's advantages are its own reward on every message: no baseline, no push-down
    assert [row.tolist() for row in adv] == [[r, r] for r in rewards]  # exact: 0/1 copied
    alone = [assign("raft", CreditBatch(episodes=(ep,)))[0].tolist() for ep in batch.episodes]
    assert alone == [row.tolist() for row in adv]


def test_oracle_controls_worked_numbers():
    batch, c = split_group()  # additive split, K = 4, c from tests/credit/test_oracle.py
    p = c.mean(axis=0)  # [0.75, 0.75, 0.75, 0.5]
    mean_only = np.array([a for a in assign("oracle", batch, {"form": "additive", "mode": "mean_only"})])
    # the centred A* with no division by a std: n (c / n - p / n) = c - p, quarters: exact
    assert mean_only.tolist() == (c - p).tolist()  # exact: quarters
    std = np.array(assign("oracle", batch, {"form": "additive"}))
    positive = np.array(assign("oracle", batch, {"form": "additive", "push_down": False}))
    # the positive part: the std-scaled advantages with every negative one set to 0
    assert positive.tolist() == np.maximum(std, 0.0).tolist()  # exact: the same floats or 0
    assert (std < 0).any() and (positive >= 0).all()
    # no push-down: agent 0's wrong answer (episode 2) is no longer pushed down, so the sum is positive
    assert positive[:, 0].sum() > 0 and abs(std[:, 0].sum()) <= 1e-12  # 4 terms of size <= 2

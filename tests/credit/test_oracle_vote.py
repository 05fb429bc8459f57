"""Majority vote at K = 5 and 9 as a threshold game (``vote`` with ``rule: majority``) and the
``oracle`` credit's ``majority`` form: A*_i = (c_i - p_i) piv_i, checked against brute-force
enumeration, on a worked example against broadcast, and its refusal of a plurality team; masking
Shapley of the same vote."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from teamplay.credit import CreditBatch, CreditResources, assign
from teamplay.credit.methods.oracle import OracleOptions, oracle_values, pivot_probabilities
from teamplay.credit.methods.shapley import ShapleyOptions, agent_shapley
from teamplay.envs.team_env import TeamEnv
from teamplay.envs.voting import strict_majority
from teamplay.errors import DataError
from teamplay.training.step.credit_stage import protocol_scorer
from tests.envs.fakes import ITEMS, FakeTask, play

ITEM = ITEMS[2]  # reference "5"


def voters(right: set[int], split_wrong: bool = True):
    """Solver j answers right when j is in ``right``; wrong answers differ by voter when ``split_wrong``."""
    def answer(request):
        j, ref = int(request.agent.rsplit("_", 1)[1]), int(request.item.reference)
        return f"The answer is {ref if j in right else ref + 1 + (j if split_wrong else 0)}."
    return answer


def vote_episode(k: int, right: set[int], rule: str = "majority", seed: int = 0, split_wrong: bool = True):
    env = TeamEnv(FakeTask(), "vote", items=ITEMS, protocol_options={"n_agents": k, "rule": rule})
    return play(env, voters(right, split_wrong), seed=seed, item=ITEM, group_id="g")


@pytest.mark.parametrize("k", [5, 9])
def test_the_team_reward_is_the_majority_s_correctness(k):
    m = k // 2 + 1
    for n_right in range(k + 1):
        ep = vote_episode(k, set(range(n_right)))
        assert ep.reward == float(n_right >= m)  # exact: 0/1
        assert ep.agent_correct == {f"solver_{j}": float(j < n_right) for j in range(k)}  # exact: 0/1 scores
    # plurality: the right answer of 2 voters wins against wrong answers that all differ
    assert vote_episode(k, {0, 1}, rule="plurality").reward == 1.0
    assert strict_majority(["5", "5", None, "6", "7"]) is None and strict_majority(["5"] * m + [None] * (k - m)) == "5"


def expected_reward(p: np.ndarray, i: int, ci: int | None) -> float:
    """E[R] of the threshold game by enumerating all 2^K answers (voter i fixed at ``ci`` if given)."""
    k, total = len(p), 0.0
    for c in itertools.product((0, 1), repeat=k):
        if ci is not None and c[i] != ci:
            continue
        weight = np.prod([p[j] if c[j] else 1 - p[j] for j in range(k) if ci is None or j != i])
        total += weight * float(sum(c) >= k // 2 + 1)
    return total


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 9).flatmap(lambda k: st.lists(st.floats(0, 1), min_size=k, max_size=k)))
def test_majority_a_star_equals_brute_force_enumeration(ps):
    p = np.array(ps)
    piv = pivot_probabilities(p, len(p) // 2 + 1)
    for i in range(len(p)):
        mean = expected_reward(p, i, None)
        for ci in (0, 1):
            a_star = expected_reward(p, i, ci) - mean
            # sums of at most 2^9 products of 9 factors in [0, 1]: rounding below 1e-12
            assert a_star == pytest.approx((ci - p[i]) * piv[i], abs=1e-12)


def test_oracle_majority_form_worked_example_against_broadcast():
    # K = 5: voters 0, 1 always right, voter 2 always wrong, voters 3 and 4 each right in 2 of 4 episodes
    patterns = [{0, 1, 3}, {0, 1, 4}, {0, 1, 3, 4}, {0, 1}]
    batch = CreditBatch(episodes=tuple(vote_episode(5, r, seed=g) for g, r in enumerate(patterns)), item=ITEM)
    assert [ep.reward for ep in batch.episodes] == [1.0, 1.0, 1.0, 0.0]
    # p = [1, 1, 0, 1/2, 1/2]; piv_3 = P(voter 4 wrong) = 1/2 (the others then hold 2 of the 3 needed),
    # piv_2 = P(3 and 4 both wrong) = 1/4, piv_0 = piv_1 = P(exactly one of 3, 4 right) = 1/2
    np.testing.assert_allclose(pivot_probabilities(np.array([1, 1, 0, 0.5, 0.5]), 3), [0.5, 0.5, 0.25, 0.5, 0.5],
                               rtol=0, atol=1e-15)
    oracle = np.array(assign("oracle", batch, {"form": "majority", "mode": "mean_only"}))
    broadcast = np.array(assign("grpo", batch, {"mode": "mean_only"}))
    # broadcast: every voter of an episode gets R - mean R = [1/4, 1/4, 1/4, -3/4]
    assert broadcast.tolist() == [[0.25] * 5, [0.25] * 5, [0.25] * 5, [-0.75] * 5]  # exact: quarters
    # oracle: n (c_i piv_i - mean) = 5 (c_i - p_i) piv_i: 0 for the voters whose vote never varies,
    # +-5/4 for the two that can decide the vote
    assert oracle.tolist() == [[0, 0, 0, 1.25, -1.25], [0, 0, 0, -1.25, 1.25],
                               [0, 0, 0, 1.25, 1.25], [0, 0, 0, -1.25, -1.25]]  # exact: quarters
    # the voters that can be pivotal differ most from broadcast; in episode 1, won 3-2 by voter 4,
    # broadcast rewards voter 3's wrong vote (+1/4) and the oracle pushes it down (-5/4)
    gap = np.abs(oracle - broadcast).mean(axis=0)
    assert set(np.flatnonzero(gap == gap.max())) == {3, 4}  # exact: 5/4 +- quarters
    assert broadcast[1, 3] > 0 > oracle[1, 3]


def test_oracle_majority_values_are_c_times_piv():
    patterns = [{0, 1, 3}, {0, 1, 4}, {0, 1, 3, 4}, {0, 1}]
    batch = CreditBatch(episodes=tuple(vote_episode(5, r, seed=g) for g, r in enumerate(patterns)))
    u = oracle_values(batch, OracleOptions(form="majority"))
    c = np.array([[float(j in r) for j in range(5)] for r in patterns])
    np.testing.assert_allclose(u, c * [0.5, 0.5, 0.25, 0.5, 0.5], rtol=0, atol=1e-15)


def test_oracle_majority_refuses_a_plurality_win_by_a_minority():
    # plurality with split wrong answers: 2 right of 5 win, which no threshold of the c_j gives
    batch = CreditBatch(episodes=(vote_episode(5, {0, 1}, rule="plurality"), vote_episode(5, {0, 1, 2}, seed=1)))
    with pytest.raises(DataError, match=r"R = \[sum c >= 3\]"):
        assign("oracle", batch, {"form": "majority"})
    # with the wrong answers agreeing, plurality and the threshold game coincide at odd K
    same = CreditBatch(episodes=(vote_episode(5, {0, 1}, rule="plurality", split_wrong=False),
                                 vote_episode(5, {0, 1, 2}, rule="plurality", seed=1, split_wrong=False)))
    assert [ep.reward for ep in same.episodes] == [0.0, 1.0]
    assign("oracle", same, {"form": "majority"})


def test_masking_shapley_of_a_majority_vote_splits_the_win_among_the_right_voters():
    task = FakeTask()
    env = TeamEnv(task, "vote", items=ITEMS, protocol_options={"n_agents": 5, "rule": "majority"})
    ep = play(env, voters({0, 2, 4}), item=ITEM, group_id="g")
    batch = CreditBatch(episodes=(ep,), item=ITEM, score=task.score,
                        resources=CreditResources(transcript_scorer=protocol_scorer(env.protocol, task, ITEM)))
    # v(S) = [right voters in S >= 3]: the unanimity game of voters 0, 2, 4, so 1/3 each, 0 for the others
    np.testing.assert_allclose(agent_shapley(batch, ShapleyOptions(value="masking"))[0], [1 / 3, 0, 1 / 3, 0, 1 / 3],
                               rtol=0, atol=1e-15)
    # withholding any right voter loses the vote; withholding a wrong one does not
    assert [env.protocol.score_visible(task, ITEM, ep.messages, [j == w for j in range(5)]) for w in range(5)] == [
        0.0, 1.0, 0.0, 1.0, 0.0]  # exact: 0/1 scores

"""The ``oracle`` credit method (A* in closed form) and masking Shapley on the additive ``split``
team, where both are the exact difference reward c_i / K."""

from __future__ import annotations

import numpy as np
import pytest

from teamplay.credit import CreditBatch, CreditResources, assign
from teamplay.credit.methods.oracle import OracleOptions, oracle_values
from teamplay.credit.methods.shapley import ShapleyOptions, agent_shapley
from teamplay.envs.tasks.catalog.tuples import TupleTask
from teamplay.envs.team_env import TeamEnv
from teamplay.errors import DataError
from teamplay.training.step.credit_stage import protocol_scorer
from tests.envs.fakes import ITEMS, FakeTask, play

K = 4
#: per episode of the group, the agents that answer wrong (c = 0); the others are right
WRONG = [{"solver_1"}, set(), {"solver_0", "solver_2", "solver_3"}, {"solver_3"}]


def policy(wrong):
    def answer(request):
        ref = int(request.item.reference)
        return f"The answer is {ref + 1 if request.agent in wrong else ref}."
    return answer


def split_group(reward: str = "fraction", k: int = K, wrong=WRONG):
    """(batch, c [G, K]) of G episodes of one K-tuple under ``split``, with the masking scorer."""
    task = TupleTask("arith", k=k, options={"level": 1})  # generated: no data needed
    item = task.load("test", limit=1)[0]
    env = TeamEnv(task, "split", items=[item], protocol_options={"n_agents": k, "reward": reward})
    episodes = tuple(play(env, policy(w), seed=g, item=item, group_id="g") for g, w in enumerate(wrong))
    resources = CreditResources(transcript_scorer=protocol_scorer(env.protocol, task, item))
    batch = CreditBatch(episodes=episodes, item=item, score=task.score, extract=task.extract, resources=resources)
    c = np.array([[ep.agent_correct[a] for a in ep.agents] for ep in episodes])
    return batch, c


def test_masking_shapley_equals_c_over_k_on_the_additive_team():
    batch, c = split_group()
    phi = agent_shapley(batch, ShapleyOptions(value="masking"))
    # v(S) = (1/K) sum_{i in S} c_i is additive: every marginal contribution of i is c_i / K, so
    # phi_i = c_i / K; exact Shapley sums 2^(K-1) weighted marginals, each exactly c_i / K or 0, so
    # only the weights' rounding remains (a few ulp of 0.25)
    assert np.abs(phi - c / K).max() <= 1e-15
    assert c.tolist() == [[1, 0, 1, 1], [1, 1, 1, 1], [0, 1, 0, 0], [1, 1, 1, 0]]


@pytest.mark.parametrize("k", [2, 8])
def test_masking_shapley_is_c_over_k_at_every_team_size(k):
    wrong = [{f"solver_{j}" for j in range(k) if (g + j) % 3 == 0} for g in range(4)]
    batch, c = split_group(k=k, wrong=wrong)
    # at k = 8, 128 weighted marginals per agent: their rounding stays below 1e-14
    assert np.abs(agent_shapley(batch, ShapleyOptions(value="masking")) - c / k).max() <= 1e-14


def test_oracle_equals_masking_shapley_on_the_additive_team():
    batch, _ = split_group()
    oracle = assign("oracle", batch, {"form": "additive"})
    shapley = assign("shapley", batch, {"value": "masking"})
    for a, b in zip(oracle, shapley, strict=True):
        # both are group_credit_advantage of c / K; only the Shapley weights' rounding differs
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)


def test_oracle_hand_worked_forms():
    batch, c = split_group()
    # additive: u = c / K
    # exact: the same elementwise division c / n
    assert oracle_values(batch, OracleOptions(form="additive")).tolist() == (c / K).tolist()
    # agent 0's credit in the 4 episodes: c = [1, 1, 0, 1], mean 0.75 -> n (c - 0.75) / K = [.25, .25, -.75, .25]
    adv = assign("oracle", batch, {"form": "additive", "mode": "mean_only"})
    assert [float(a[0]) for a in adv] == [0.25, 0.25, -0.75, 0.25]  # exact: quarters: every step is exact
    # conjunctive: u_i = c_i prod_{j != i} p_j, p = group means [0.75, 0.75, 0.75, 0.5]
    batch_all, c_all = split_group("all")
    u = oracle_values(batch_all, OracleOptions(form="conjunctive"))
    p = np.array([0.75, 0.75, 0.75, 0.5])
    expected = c_all * np.array([np.prod(np.delete(p, i)) for i in range(K)])
    np.testing.assert_allclose(u, expected, rtol=0, atol=1e-15)  # one product of 3 factors each
    assert u[0].tolist() == pytest.approx([0.28125, 0.0, 0.28125, 0.421875], abs=1e-15)


def test_oracle_spoiler_credits_the_first_answer_only():
    from teamplay.agents.roles import Role, Team

    team = Team(roles=(Role(name="solver", prompt="Solve."), Role(name="teammate", prompt="Check.")))
    env = TeamEnv(FakeTask(), "sequential", team, items=ITEMS[:1], protocol_options={"n_agents": 2})

    def spoil(right: bool, spoiled: bool):
        def answer(request):
            ref = int(request.item.reference)
            if request.agent == "solver_0":
                return f"The answer is {ref if right else ref + 1}."
            return f"The answer is {ref + 5}." if spoiled else f"The answer is {ref if right else ref + 1}."
        return answer

    cases = [(True, False), (True, True), (False, False), (False, True)]
    episodes = tuple(play(env, spoil(*case), seed=g, item=ITEMS[0], group_id="g") for g, case in enumerate(cases))
    batch = CreditBatch(episodes=episodes, item=ITEMS[0])
    u = oracle_values(batch, OracleOptions(form="spoiler"))
    assert [ep.reward for ep in episodes] == [1.0, 0.0, 0.0, 0.0]
    # the solver's own answer, whether or not the teammate spoiled it; the teammate gets nothing
    assert u.tolist() == [[1.0, 0.0], [1.0, 0.0], [0.0, 0.0], [0.0, 0.0]]  # exact: 0/1 values copied


def test_oracle_refuses_a_team_of_another_form():
    batch, _ = split_group("all")  # a conjunctive team read as additive
    with pytest.raises(DataError, match=r"episode 0 .* reward 0.0 but its form's rule R = mean c gives 0.75"):
        assign("oracle", batch, {"form": "additive"})
    batch, _ = split_group("fraction")
    with pytest.raises(DataError, match="rule R = prod c"):
        assign("oracle", batch, {"form": "conjunctive"})

"""The ``split`` protocol (K solvers, one sub-problem each) on the ``tuples`` task: PettingZoo's
checkers, its rewards, its characteristic function and its refusals."""

from __future__ import annotations

import pytest
from pettingzoo.test import api_test, parallel_api_test, seed_test
from pettingzoo.test.seed_test import parallel_seed_test

from teamplay.agents.roles import Role, Team
from teamplay.envs.parallel import parallel_team_env
from teamplay.envs.protocols import get_protocol
from teamplay.envs.tasks.catalog.tuples import TupleTask, part
from teamplay.envs.team_env import TeamEnv
from teamplay.errors import ConfigError
from tests.envs.fakes import ITEMS, FakeTask, play

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # PettingZoo's advice on Box spaces


def tuples(k: int):
    task = TupleTask(FakeTask(), k=k)
    return task, task.load("test", limit=len(ITEMS) // k)


def per_agent_team(k: int) -> Team:
    """K roles of one agent each: one adapter per agent."""
    return Team(roles=tuple(Role(name=f"s{j}", prompt=f"You solve problem {j}.") for j in range(k)))


@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("reward", ["fraction", "all"])
def test_split_passes_the_aec_and_parallel_checkers(k, reward):
    task, items = tuples(k)
    options = {"n_agents": k, "reward": reward}
    api_test(TeamEnv(task, "split", items=items, protocol_options=options), num_cycles=20)
    seed_test(lambda: TeamEnv(task, "split", items=items, protocol_options=options), num_cycles=20)
    parallel_api_test(parallel_team_env(task, "split", items=items, protocol_options=options), num_cycles=20)
    parallel_seed_test(lambda: parallel_team_env(task, "split", items=items, protocol_options=options))


def test_split_with_one_adapter_per_agent_passes_the_checkers():
    task, items = tuples(2)
    api_test(TeamEnv(task, "split", per_agent_team(2), items=items), num_cycles=20)
    parallel_api_test(parallel_team_env(task, "split", per_agent_team(2), items=items), num_cycles=20)


def answer_by_agent(wrong: set[str]):
    """Right on its own problem, except the agents in ``wrong`` (reference + 1)."""

    def policy(request):
        ref = int(request.item.reference)
        return f"The answer is {ref + 1 if request.agent in wrong else ref}."

    return policy


def test_each_agent_sees_only_its_own_problem_and_the_reward_is_the_fraction_right():
    task, items = tuples(3)
    env = TeamEnv(task, "split", items=items, protocol_options={"n_agents": 3})
    seen = {}

    def policy(request):
        seen[request.agent] = (request.chat[1].content, len(request.transcript))
        return answer_by_agent({"solver_1"})(request)

    ep = play(env, policy, item=items[1])
    # items[1] is FakeTask items 3, 4, 5: "What is i + (i+1)?" with references 7, 9, 11
    assert seen == {"solver_0": ("What is 3 + 4?", 0), "solver_1": ("What is 4 + 5?", 0),
                    "solver_2": ("What is 5 + 6?", 0)}
    assert ep.agent_correct == {"solver_0": 1.0, "solver_1": 0.0, "solver_2": 1.0}
    assert ep.reward == pytest.approx(2 / 3, abs=1e-15)  # (1 + 0 + 1) / 3, one rounding of a division
    assert ep.final_answer == "7; 10; 11"


def test_the_conjunctive_variant_pays_only_when_every_answer_is_right():
    task, items = tuples(2)
    env = TeamEnv(task, "split", items=items, protocol_options={"n_agents": 2, "reward": "all"})
    # exact: rewards are the constants 0.0 and 1.0
    assert play(env, answer_by_agent(set()), item=items[0]).reward == 1.0
    # exact: rewards are the constants 0.0 and 1.0
    assert play(env, answer_by_agent({"solver_0"}), item=items[0]).reward == 0.0


def test_score_visible_counts_only_the_coalitions_own_answers():
    task, items = tuples(3)
    env = TeamEnv(task, "split", items=items, protocol_options={"n_agents": 3})
    ep = play(env, answer_by_agent({"solver_1"}), item=items[0])
    split = env.protocol
    # v(S) = (1/3) sum_{j in S} c_j with c = (1, 0, 1)
    assert split.score_visible(task, items[0], ep.messages, [False, True, True]) == pytest.approx(1 / 3, abs=1e-15)
    assert split.score_visible(task, items[0], ep.messages, [True, False, True]) == 0.0  # exact: (1/3) * 0 = 0
    assert split.score_visible(task, items[0], ep.messages, [True, True, True]) == 0.0  # exact: (1/3) * 0 = 0
    assert split.score_visible(task, items[0], ep.messages, [False, False, False]) == pytest.approx(2 / 3, abs=1e-15)


def test_tuples_group_consecutive_items_and_keep_each_part_whole():
    task, items = tuples(2)
    assert [it.id for it in items] == ["fake/0+fake/1", "fake/2+fake/3", "fake/4+fake/5"]
    assert items[0].reference == "1; 3"
    assert part(items[1], 1) == ITEMS[3]
    # a single completion against a whole tuple: the mean over its parts (right for one of two)
    assert task.score("The answer is 3.", items[0]) == 0.5  # exact: the mean of 1 and 0
    with pytest.raises(ConfigError, match="enough for 3 tuples of 2, not the 4"):
        task.load("test", limit=4)


def test_split_refuses_a_task_without_k_problems_per_item():
    with pytest.raises(ConfigError, match="needs items of 2 problems.*task 'fake', one problem per item"):
        TeamEnv(FakeTask(), "split", items=ITEMS)
    task, items = tuples(3)
    with pytest.raises(ConfigError, match="needs items of 2 problems.*got items of 3 problems"):
        TeamEnv(task, "split", items=items, protocol_options={"n_agents": 2})
    with pytest.raises(ConfigError, match="n_agents=3 but the team has 2 agents"):
        TeamEnv(task, "split", per_agent_team(2), items=items, protocol_options={"n_agents": 3})
    with pytest.raises(ConfigError, match="unknown option 'rewards'"):
        get_protocol("split", rewards="all")

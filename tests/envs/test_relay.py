"""The ``relay`` protocol (K - 1 informants with one hidden operand each, one answerer that sees
none) on the ``relay_sum`` task: the scripted team, a silent informant, what the answerer can see,
its characteristic function, the oracle's closed form and its refusals. PettingZoo's checkers run
in ``test_api_conformance.py``."""

from __future__ import annotations

import re

import numpy as np
import pytest

from teamplay.agents.backends.scripted import ScriptedBackend
from teamplay.agents.roles import Role, Team
from teamplay.credit import CreditBatch, CreditResources
from teamplay.credit.methods.oracle import OracleOptions, oracle_values
from teamplay.envs.tasks import get_task
from teamplay.envs.tasks.catalog.relay_sum import RelaySumTask
from teamplay.envs.team_env import TeamEnv
from teamplay.errors import ConfigError, DataError
from teamplay.records import SamplingParams, TaskItem
from teamplay.training.play.rollout import RolloutJob, RolloutRunner
from tests.envs.fakes import play


def relay_env(k: int, items=None):
    task = RelaySumTask(n_operands=k - 1)
    items = items or task.load("test", limit=4)
    return task, items, TeamEnv(task, "relay", items=items, protocol_options={"n_agents": k})


def adder_with(silent: set[str] = frozenset(), wrong: set[str] = frozenset()):
    """The scripted ``adder`` policy, except agents in ``silent`` (no answer) and in ``wrong``
    (their piece + 1)."""
    backend = ScriptedBackend("adder")

    def policy(request):
        if request.agent in silent:
            return "I have nothing to add."
        if request.agent in wrong:
            return f"The answer is {int(request.item.reference) + 1}."
        return backend.generate([request], SamplingParams())[0].text

    return policy


@pytest.mark.parametrize("k", [2, 3, 5])
def test_a_scripted_adder_team_is_always_right_through_the_runner(k):
    task, items, _ = relay_env(k)
    runner = RolloutRunner(lambda: TeamEnv(task, "relay", items=items, protocol_options={"n_agents": k}),
                           ScriptedBackend("adder"), SamplingParams())
    episodes = runner.run([RolloutJob(item=item, group_id=item.id) for item in items], seed=0)
    assert [ep.reward for ep in episodes] == [1.0] * len(items)
    for ep, item in zip(episodes, items, strict=True):
        operands = [str(x) for x in item.metadata["operands"]]
        assert [m.answer for m in ep.messages] == [*operands, item.reference]  # each states its piece
        assert ep.agents == (*(f"informant_{j}" for j in range(k - 1)), "answerer_0")
        assert ep.agent_correct == dict.fromkeys(ep.agents, 1.0)
        assert ep.calls == k and ep.final_answer == item.reference


@pytest.mark.parametrize("k", [2, 3, 5])
def test_one_silent_informant_makes_the_team_wrong(k):
    _, items, env = relay_env(k)
    silent = f"informant_{k - 2}"
    ep = play(env, adder_with(silent={silent}), seed=0, item=items[0])
    assert ep.reward == 0.0
    assert ep.agent_correct[silent] == 0.0 and ep.agent_correct["answerer_0"] == 0.0
    others = [a for a in ep.agents if a.startswith("informant") and a != silent]
    assert all(ep.agent_correct[a] == 1.0 for a in others)
    operands = items[0].metadata["operands"]
    # the adder sums what it read: every operand but the silent one (none at all when K = 2)
    expected = sum(operands[:-1])
    assert ep.final_answer == (str(expected) if k > 2 else None)


# operands chosen so that no other number of the transcript (round headers, counts) equals one
HIDDEN = TaskItem(id="relay/hidden", prompt="What is 47 + 58?", reference="105", metadata={"operands": (47, 58)})


def answerer_view(policy):
    """(observation, request) of the answerer at its turn, after the informants played ``policy``."""
    _, _, env = relay_env(3, items=[HIDDEN])
    env.reset(seed=0, options={"item": HIDDEN})
    while env.agent_selection != "answerer_0":
        env.step(policy(env.infos[env.agent_selection]["turn"]))
    return env.observe("answerer_0"), env.infos["answerer_0"]["turn"]


def test_the_answerer_sees_no_operand_but_in_the_informants_messages():
    observation, request = answerer_view(adder_with(silent={"informant_0", "informant_1"}))
    numbers = set(re.findall(r"\d+", observation))
    assert not numbers & {"47", "58", "105"}, observation
    assert "47" not in request.item.prompt and "operands" not in request.item.metadata
    assert all(m.agent != "answerer_0" for m in request.transcript)
    # the same turn with speaking informants: the operands reach it only through their messages
    observation, request = answerer_view(adder_with())
    assert {"47", "58"} <= set(re.findall(r"\d+", observation))
    assert [m.answer for m in request.transcript] == ["47", "58"]


def test_each_informant_sees_only_its_own_operand():
    _, _, env = relay_env(3, items=[HIDDEN])
    env.reset(seed=0, options={"item": HIDDEN})
    first = env.observe("informant_0")
    request = env.infos["informant_0"]["turn"]
    assert "47" in first and "58" not in first and request.item.reference == "47"
    assert request.transcript == ()


def test_characteristic_function_withholds_operands():
    task, _, env = relay_env(3, items=[HIDDEN])
    ep = play(env, adder_with(), seed=0, item=HIDDEN)
    assert env.protocol.score_visible(task, HIDDEN, ep.messages, [False, False, False]) == 1.0
    # v(S) = [answerer in S] c_answerer prod_j [j in S] c_j: any withheld member gives 0
    for hidden in ([True, False, False], [False, True, False], [False, False, True]):
        assert env.protocol.score_visible(task, HIDDEN, ep.messages, hidden) == 0.0


def test_oracle_relay_form_is_the_informants_conjunctive_advantage():
    task, _, env = relay_env(3, items=[HIDDEN])
    # G = 4 episodes; informant_0 wrong in episode 1, informant_1 wrong in episodes 2 and 3
    wrong = [set(), {"informant_0"}, {"informant_1"}, {"informant_1"}]
    episodes = tuple(play(env, adder_with(wrong=w), seed=g, item=HIDDEN, group_id="g") for g, w in enumerate(wrong))
    assert [ep.reward for ep in episodes] == [1.0, 0.0, 0.0, 0.0]
    batch = CreditBatch(episodes=episodes, item=HIDDEN, score=task.score, extract=task.extract,
                        resources=CreditResources())
    u = oracle_values(batch, OracleOptions(form="relay"))
    # c_0 = [1, 0, 1, 1] (p_0 = 3/4), c_1 = [1, 1, 0, 0] (p_1 = 1/2): u_0 = c_0 * p_1, u_1 = c_1 * p_0
    # exact: products of 0, 1/2, 3/4 and 1
    assert np.allclose(u, [[0.5, 0.75, 0], [0.0, 0.75, 0], [0.5, 0.0, 0], [0.5, 0.0, 0]], atol=0, rtol=0)
    with pytest.raises(DataError, match="R = prod c_informants"):  # an answerer right by luck breaks the form
        lucky = play(env, lambda r: "The answer is 105." if r.agent == "answerer_0" else "no",
                     seed=0, item=HIDDEN, group_id="g")
        oracle_values(CreditBatch(episodes=(lucky,), item=HIDDEN, score=task.score, extract=task.extract,
                                  resources=CreditResources()), OracleOptions(form="relay"))


def test_refusals_name_the_fix():
    with pytest.raises(ConfigError, match="relay_sum"):
        TeamEnv(get_task("arith"), "relay", items=get_task("arith").load("test", limit=2))
    with pytest.raises(ConfigError, match="n_operands: 2"):  # 2 informants, items of 3 operands
        TeamEnv(RelaySumTask(n_operands=3), "relay", items=RelaySumTask(n_operands=3).load("test", limit=1))
    team = Team(roles=(Role(name="informant", count=3), Role(name="answerer")))
    with pytest.raises(ConfigError, match="n_agents=3 but the team has 4 agents"):
        TeamEnv(RelaySumTask(n_operands=3), "relay", team, protocol_options={"n_agents": 3})
    with pytest.raises(ConfigError, match="exactly 1"):
        TeamEnv(RelaySumTask(), "relay", Team(roles=(Role(name="informant", count=2), Role(name="answerer", count=2))))
    with pytest.raises(ConfigError, match="n_operands must be an integer from 1 to 16"):
        RelaySumTask(n_operands=0)


def test_relay_sum_items_are_reproducible_sums_kept_apart_by_split():
    task = RelaySumTask(n_operands=4, max_operand=20)
    test, train = task.load("test", limit=30), task.load("train", limit=30)
    assert task.load("test", limit=5) == test[:5]
    assert all(sum(i.metadata["operands"]) == int(i.reference) for i in test + train)
    assert all(1 <= x <= 20 for i in test for x in i.metadata["operands"])
    assert not {i.prompt for i in test} & {i.prompt for i in train}

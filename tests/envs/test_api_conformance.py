"""Every protocol passes PettingZoo's own checkers: api_test, seed_test, parallel_api_test.

The matrix is the protocol registry (``tests/envs/conformance.py``): a registered protocol is checked
without editing a list; the variants below add options the defaults do not reach.
"""

from __future__ import annotations

import pytest
from pettingzoo.test import api_test, parallel_api_test, seed_test
from pettingzoo.test.seed_test import parallel_seed_test

from teamplay.envs.parallel import parallel_team_env
from teamplay.envs.protocols import protocol_names
from teamplay.envs.tasks.catalog.relay_sum import RelaySumTask
from teamplay.envs.team_env import TeamEnv
from teamplay.errors import ConfigError
from tests.envs.conformance import check_conformance, matrix, matrix_id
from tests.envs.fakes import ITEMS, FakeTask, play, truthful

# PettingZoo's generic advice (use Box/Discrete spaces, NumPy observations) does not apply to text
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

VARIANTS = [
    ("proposer_reviewer", {"n_agents": 2, "rounds": 4}),
    ("debate", {"n_agents": 2, "rounds": 0}),
    ("vote", {"n_agents": 5}),
    ("vote", {"n_agents": 5, "rule": "majority"}),
    ("vote", {"n_agents": 9, "rule": "majority"}),
    ("review", {"verdict_prefix": ""}),
    ("sequential", {"n_agents": 1}),
    ("paths", {"n_paths": 1, "paths_see": "earlier"}),
]


def _ids(variant):
    name, options = variant
    return name.rsplit("/", 1)[-1] + "".join(f"-{k}{v}" for k, v in options.items())


@pytest.mark.parametrize("name", matrix(), ids=map(matrix_id, matrix()))
def test_every_registered_protocol_passes_the_checkers(name):
    check_conformance(name)


def test_the_matrix_is_the_registry():
    assert set(protocol_names()) <= set(matrix())
    assert {"relay", "split", "review", "paths"} <= set(matrix())


@pytest.mark.parametrize("variant", VARIANTS, ids=map(_ids, VARIANTS))
def test_api_and_seed(variant):
    name, options = variant
    check_conformance(name, options)


@pytest.mark.parametrize("k", [2, 3, 5])
def test_relay_passes_the_aec_and_parallel_checkers(k):
    # relay needs items split into K - 1 operands (relay_sum); the matrix checks K = 3 only
    task = RelaySumTask(n_operands=k - 1)
    items, options = task.load("test", limit=6), {"n_agents": k}
    api_test(TeamEnv(task, "relay", items=items, protocol_options=options), num_cycles=20)
    seed_test(lambda: TeamEnv(task, "relay", items=items, protocol_options=options), num_cycles=20)
    parallel_api_test(parallel_team_env(task, "relay", items=items, protocol_options=options), num_cycles=20)
    parallel_seed_test(lambda: parallel_team_env(task, "relay", items=items, protocol_options=options))


@pytest.mark.parametrize("k", [5, 9])
@pytest.mark.parametrize("rule", ["plurality", "majority"])
def test_vote_at_five_and_nine_passes_the_parallel_checkers(k, rule):
    options = {"n_agents": k, "rule": rule}
    parallel_api_test(parallel_team_env(FakeTask(), "vote", items=ITEMS, protocol_options=options), num_cycles=20)
    parallel_seed_test(lambda: parallel_team_env(FakeTask(), "vote", items=ITEMS, protocol_options=options))


def test_parallel_refused_when_a_round_sees_itself(tmp_path):
    spec = tmp_path / "pair.yaml"
    spec.write_text(
        "name: pair\nroles: {solver: {prompt: Solve., count: 2}}\n"
        "schedule: [{role: solver, instruction: Solve., sees: all}]\nfinal: {rule: last}\n")
    with pytest.raises(ConfigError, match="simultaneous rounds"):
        parallel_team_env(FakeTask(), str(spec), items=ITEMS)
    # the AEC env plays it turn by turn: solver_1 sees solver_0's message of the same round
    env = TeamEnv(FakeTask(), str(spec), items=ITEMS)
    env.reset(seed=0)
    env.step("The answer is 4.")
    assert [m.agent for m in env.infos["solver_1"]["turn"].transcript] == ["solver_0"]


@pytest.mark.parametrize("name", ["vote", "debate", "paths"])
def test_parallel_and_aec_give_the_same_episode(name):
    # answers depend on agent and round, so any mix-up of order or visibility shows in the episode
    def policy(request):
        return f"{request.agent} in round {request.round} says {len(request.transcript)}"

    aec = play(TeamEnv(FakeTask(), name, items=ITEMS), policy, seed=3)
    par = parallel_team_env(FakeTask(), name, items=ITEMS)
    observations, infos = par.reset(seed=3)
    while par.agents:
        actions = {a: policy(info["turn"]) for a, info in infos.items() if "turn" in info}
        observations, rewards, terminations, truncations, infos = par.step(actions)
    assert par.episode() == aec


def test_parallel_step_needs_every_pending_agent():
    par = parallel_team_env(FakeTask(), "vote", items=ITEMS)
    par.reset(seed=0)
    with pytest.raises(ValueError, match="solver_2"):
        par.step({"solver_0": "1", "solver_1": "2"})


def test_parallel_rewards_and_observations():
    par = parallel_team_env(FakeTask(), "debate", items=ITEMS, protocol_options={"rounds": 1})
    observations, infos = par.reset(seed=0, options={"item": ITEMS[2]})
    assert set(observations) == {"debater_0", "debater_1", "debater_2"}
    assert all("[user]\nWhat is 2 + 3?" in o for o in observations.values())
    _, rewards, terms, _, infos = par.step({a: truthful(i["turn"]) for a, i in infos.items()})
    assert rewards == dict.fromkeys(rewards, 0.0) and not any(terms.values())
    _, rewards, terms, _, _ = par.step({a: truthful(i["turn"]) for a, i in infos.items()})
    assert rewards == dict.fromkeys(["debater_0", "debater_1", "debater_2"], 1.0)
    assert all(terms.values()) and par.agents == []

"""The ``paths`` protocol (K reasoning paths, then a judge): schedules and visibility under both
``paths_see`` values, PettingZoo's checkers, rewards and ``agent_correct`` with scripted paths (free
riders among them), its masked-transcript value, its refusals, the shipped config, and Shapley credit
with a generative judge that gives a silent path nothing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pettingzoo.test import api_test, parallel_api_test, seed_test
from pettingzoo.test.seed_test import parallel_seed_test

from teamplay.agents.backends.mixed import MixedBackend
from teamplay.agents.backends.scripted import ScriptedBackend
from teamplay.agents.roles import Role, Team
from teamplay.config import ProtocolConfig, TrainConfig, load_config
from teamplay.credit import CreditBatch, CreditResources, assign
from teamplay.credit.methods.shapley import agent_shapley
from teamplay.credit.registry import get_credit, parse_options
from teamplay.credit.values.shapley import shapley_exact
from teamplay.envs.parallel import parallel_team_env
from teamplay.envs.protocols import get_protocol
from teamplay.envs.protocols.catalog.paths import JUDGE_INSTRUCTION, JUDGE_PROMPT
from teamplay.envs.protocols.catalog.single import SOLVE_INSTRUCTION, SOLVER_PROMPT
from teamplay.envs.team_env import TeamEnv
from teamplay.errors import ConfigError
from teamplay.records import SamplingParams
from teamplay.training.play.rollout import RolloutJob, RolloutRunner
from teamplay.training.wiring.checks import check_run
from teamplay.training.wiring.envs import env_factory
from tests.credit.test_generative_judge import ITEM as ARITH_ITEM
from tests.credit.test_generative_judge import TASK as ARITH
from tests.credit.test_generative_judge import TEMPLATE, FakeJudge, majority_judge
from tests.envs.fakes import ITEMS, FakeTask, play

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # PettingZoo's advice on Box spaces

ITEM = ITEMS[3]  # "What is 3 + 4?", reference "7"
CONFIG = Path(__file__).resolve().parents[2] / "configs" / "paths_free_riders.yaml"


def path_team(*policies: str | None, judge: str | None = None) -> Team:
    """One role per path (``a``, ``b``, ...; ``scripted:POLICY`` where a policy is given) and ``judge``."""
    paths = tuple(Role(name=chr(ord("a") + j), policy=None if p is None else f"scripted:{p}")
                  for j, p in enumerate(policies))
    return Team(roles=(*paths, Role(name="judge", policy=None if judge is None else f"scripted:{judge}")))


def by_role(team: Team):
    """A policy that answers each request with its role's scripted policy (``teamplay.agents.backends.scripted``)."""
    backends = {r.name: ScriptedBackend(r.scripted_spec) for r in team.roles}
    return lambda request: backends[request.role].generate([request], SamplingParams())[0].text


def scripted_episode(*policies: str, judge: str, paths_see: str = "none"):
    team = path_team(*policies, judge=judge)
    env = TeamEnv(FakeTask(), "paths", team, items=ITEMS, protocol_options={"paths_see": paths_see})
    return play(env, by_role(team), item=ITEM), env


# ---- the plan ----------------------------------------------------------------------------------

def test_independent_paths_answer_in_one_round_then_the_judge_reads_them_all():
    env = TeamEnv(FakeTask(), "paths")
    assert env.possible_agents == ["path_0", "path_1", "path_2", "judge_0"]
    assert [(t.agent, t.stage, t.round) for t in env.protocol.schedule(env.team)] == [
        ("path_0", "solve", 0), ("path_1", "solve", 0), ("path_2", "solve", 0), ("judge_0", "aggregate", 1)]
    seen = {}

    def policy(request):
        seen[request.agent] = request
        return f"{request.agent} says {int(request.item.reference) + (request.agent == 'path_1')}."

    ep = play(env, policy, item=ITEM)
    assert {a: [m.agent for m in r.transcript] for a, r in seen.items()} == {
        "path_0": [], "path_1": [], "path_2": [], "judge_0": ["path_0", "path_1", "path_2"]}
    assert seen["path_0"].chat[0].content == f"{SOLVER_PROMPT} {FakeTask.answer_instruction}"
    assert seen["path_0"].chat[-1].content == SOLVE_INSTRUCTION
    assert seen["judge_0"].chat[0].content == f"{JUDGE_PROMPT} {FakeTask.answer_instruction}"
    assert seen["judge_0"].chat[2].content == "[path_0, round 1]: path_0 says 7."
    assert seen["judge_0"].chat[-1].content == JUDGE_INSTRUCTION
    # the judge's text ends "judge_0 says 7." (its last integer: 7): right; path_1 said 8
    assert ep.final_answer == "7" and ep.reward == 1.0
    assert ep.metadata["path_answers"] == {"path_0": "7", "path_1": "8", "path_2": "7"}
    assert ep.metadata["initial_answer"] == "7"  # after round 0: the paths' majority (7, 8, 7)


def test_with_paths_see_earlier_path_k_plays_round_k_and_sees_the_earlier_paths():
    team = Team(roles=(Role(name="judge"), Role(name="worker", count=2), Role(name="rider")))
    env = TeamEnv(FakeTask(), "paths", team, protocol_options={"paths_see": "earlier", "n_paths": 3})
    # the judge acts last wherever the team lists it; paths in team order
    assert env.possible_agents == ["worker_0", "worker_1", "rider_0", "judge_0"]
    assert [(t.agent, t.role, t.round) for t in env.protocol.schedule(team)] == [
        ("worker_0", "worker", 0), ("worker_1", "worker", 1), ("rider_0", "rider", 2), ("judge_0", "judge", 3)]
    seen = {}

    def policy(request):
        seen[request.agent] = [m.agent for m in request.transcript]
        return f"The answer is {8 if request.agent == 'worker_0' else 7}."

    ep = play(env, policy, item=ITEM)
    assert seen == {"worker_0": [], "worker_1": ["worker_0"], "rider_0": ["worker_0", "worker_1"],
                    "judge_0": ["worker_0", "worker_1", "rider_0"]}
    assert ep.metadata["initial_answer"] == "8"  # after round 0: the first path alone
    assert ep.final_answer == "7" and ep.reward == 1.0


# ---- PettingZoo's checkers ---------------------------------------------------------------------

@pytest.mark.parametrize("paths_see", ["none", "earlier"])
@pytest.mark.parametrize("team", [None, path_team(None, None)], ids=["shared_role", "role_per_path"])
def test_paths_pass_the_aec_and_parallel_checkers(paths_see, team):
    options = {"paths_see": paths_see}
    api_test(TeamEnv(FakeTask(), "paths", team, items=ITEMS, protocol_options=options), num_cycles=20)
    seed_test(lambda: TeamEnv(FakeTask(), "paths", team, items=ITEMS, protocol_options=options), num_cycles=20)
    parallel_api_test(parallel_team_env(FakeTask(), "paths", team, items=ITEMS, protocol_options=options),
                      num_cycles=20)
    parallel_seed_test(lambda: parallel_team_env(FakeTask(), "paths", team, items=ITEMS, protocol_options=options))


@pytest.mark.parametrize("paths_see,steps", [
    ("none", [["path_0", "path_1", "path_2"], ["judge_0"]]),
    ("earlier", [["path_0"], ["path_1"], ["path_2"], ["judge_0"]]),
])
def test_each_parallel_step_is_one_round(paths_see, steps):
    # (tests/envs/test_api_conformance.py: the parallel and AEC episodes are equal)
    par = parallel_team_env(FakeTask(), "paths", items=ITEMS, protocol_options={"paths_see": paths_see})
    _, infos = par.reset(seed=0)
    acted = []
    while par.agents:
        acting = sorted(a for a, info in infos.items() if "turn" in info)
        acted.append(acting)
        _, _, _, _, infos = par.step({a: "The answer is 7." for a in acting})
    assert acted == steps


# ---- rewards and agent_correct with scripted paths ---------------------------------------------

def test_the_reward_is_the_judges_answer_not_the_paths():
    # truthful paths, a wrong judge: every path right (agent_correct 1), the team wrong
    ep, _ = scripted_episode("truthful", "truthful", "truthful", judge="wrong")
    assert ep.reward == 0.0 and ep.final_answer == "8"
    assert dict(ep.agent_correct) == {"a_0": 1.0, "b_0": 1.0, "c_0": 1.0, "judge_0": 0.0}
    assert ep.metadata["initial_answer"] == "7"  # the paths' vote was right: the judge broke it
    # a judge copying the one right path beats the paths' (wrong) majority
    ep, _ = scripted_episode("truthful", "wrong", "wrong", judge="copier(agent=a_0)")
    assert ep.reward == 1.0 and ep.final_answer == "7" and ep.metadata["initial_answer"] == "8"
    assert dict(ep.agent_correct) == {"a_0": 1.0, "b_0": 0.0, "c_0": 0.0, "judge_0": 1.0}
    # a judge without an answer: reward 0; the paths' right answers do not stand in
    ep, _ = scripted_episode("truthful", "truthful", "truthful", judge="silent")
    assert ep.reward == 0.0 and ep.final_answer is None and ep.agent_correct["judge_0"] == 0.0


@pytest.mark.parametrize("paths_see,copier_right", [("none", 0.0), ("earlier", 1.0)])
def test_a_copier_copies_only_what_it_can_see_and_a_silent_path_answers_nothing(paths_see, copier_right):
    # judge `copier`: the latest answer in its transcript (silent c gave none, so b's if any, else a's)
    ep, _ = scripted_episode("truthful", "copier(agent=a_0)", "silent", judge="copier", paths_see=paths_see)
    assert [m.text for m in ep.messages][1] == ("The answer is \\boxed{7}." if copier_right else "I have no answer.")
    assert dict(ep.agent_correct) == {"a_0": 1.0, "b_0": copier_right, "c_0": 0.0, "judge_0": 1.0}
    assert ep.metadata["path_answers"] == {"a_0": "7", "b_0": "7" if copier_right else None, "c_0": None}
    assert ep.reward == 1.0


# ---- the masked-transcript value ---------------------------------------------------------------

def test_score_visible_is_the_judges_answer_when_visible_so_masking_credits_only_the_judge():
    ep, env = scripted_episode("truthful", "copier(agent=a_0)", "silent", judge="copier", paths_see="earlier")
    protocol = env.protocol
    # masks: bit j = agent j of (a_0, b_0, c_0, judge_0); v(S) = R [judge_0 in S] = [judge_0 in S]
    table = [protocol.score_visible(FakeTask(), ITEM, ep.messages, [not (s >> j) & 1 for j in range(4)])
             for s in range(16)]
    assert table == [0.0] * 8 + [1.0] * 8
    # the judge is the one player that changes v: it gets v(N) - v(empty) = 1, the paths none
    assert shapley_exact(4, np.array(table)) == pytest.approx([0, 0, 0, 1], abs=1e-12)
    # a wrong judge scores 0 even with every right path visible
    wrong, _ = scripted_episode("truthful", "truthful", "truthful", judge="wrong")
    assert protocol.score_visible(FakeTask(), ITEM, wrong.messages, [False] * 4) == 0.0
    # a prefix without the judge's message has no team answer
    assert protocol.score_visible(FakeTask(), ITEM, ep.messages[:3], [False] * 3) == 0.0


# ---- refusals ----------------------------------------------------------------------------------

@pytest.mark.parametrize("options,team,message", [
    ({"n_paths": 0}, None, "protocol 'paths' option 'n_paths': Input should be greater than or equal to 1"),
    ({"paths_see": "all"}, None, "protocol 'paths' option 'paths_see': Input should be 'none' or 'earlier'"),
    ({"judge_role": "Judge"}, None, "protocol 'paths' option 'judge_role': String should match pattern"),
    ({}, Team(roles=(Role(name="a"), Role(name="b"))),
     "team.roles: protocol 'paths' needs its judge role 'judge' (option judge_role) in the team (team has: a, b)"),
    ({"judge_role": "boss"}, path_team(None, None),
     "needs its judge role 'boss' (option judge_role) in the team (team has: a, b, judge)"),
    ({}, Team(roles=(Role(name="a"), Role(name="judge", count=2))),
     "team.roles['judge'].count: protocol 'paths' has one judge, got 2"),
    ({}, Team(roles=(Role(name="judge"),)), "needs at least one path besides the judge role 'judge'"),
    ({"n_paths": 3}, path_team(None, None),
     "protocol 'paths' option n_paths=3 needs 4 agents (3 paths and the judge) but the team has 3"),
])
def test_config_errors_are_one_clear_line(options, team, message):
    with pytest.raises(ConfigError) as err:
        TeamEnv(FakeTask(), get_protocol("paths", **options), team)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_judge_role_named_path_keeps_the_default_team_valid():
    env = TeamEnv(FakeTask(), "paths", protocol_options={"judge_role": "path", "n_paths": 2})
    assert env.possible_agents == ["solver_0", "solver_1", "path_0"]
    assert env.protocol.answer_roles == ("path",)


# ---- the shipped config ------------------------------------------------------------------------

def test_the_free_riders_config_is_accepted_before_any_model_loads():
    cfg = load_config(TrainConfig, CONFIG)
    assert check_run(cfg).credit_needs == frozenset({"judge"})
    _, team = env_factory(ARITH, cfg.protocol, cfg.team)
    assert team.agent_ids() == ["path_a_0", "path_b_0", "copier_0", "silent_0", "judge_0"]
    assert [r.name for r in team.roles if r.scripted] == ["copier", "silent"]
    # the copier copies an agent of the team, which acts before it (paths_see: earlier)
    assert team.role("copier").scripted_spec == "copier(agent=path_a_0)"
    assert cfg.protocol.options == {"n_paths": 4, "paths_see": "earlier"}


# ---- end to end: Shapley credit with a generative judge ----------------------------------------

def run_team(first_path: str):
    """One episode on 7 + 5 of: path_a (``first_path``), path_b copying path_a, path_c silent, and a
    judge restating the latest answer it reads; paths_see: earlier."""
    team = Team(roles=(Role(name="path_a", policy=f"scripted:{first_path}"),
                       Role(name="path_b", policy="scripted:copier(agent=path_a_0)"),
                       Role(name="path_c", policy="scripted:silent"),
                       Role(name="judge", policy="scripted:copier")))
    make_env, team = env_factory(ARITH, ProtocolConfig(name="paths", options={"paths_see": "earlier"}), team)
    runner = RolloutRunner(make_env, MixedBackend(None, team.scripted_roles()), SamplingParams(max_new_tokens=16))
    (ep,) = runner.run([RolloutJob(item=ARITH_ITEM, group_id="g")], seed=0)
    return ep


def test_judge_shapley_gives_the_silent_path_no_credit():
    right, wrong = run_team("truthful"), run_team("wrong")
    assert [m.text for m in right.messages] == ["The answer is \\boxed{12}."] * 2 + [
        "I have nothing to add.", "The answer is \\boxed{12}."]
    assert right.reward == 1.0 and wrong.reward == 0.0 and wrong.final_answer == "13"
    # As if path_a were right in one episode of the group and wrong in the other (the same agents).
    # Credit judge: the majority answer of the paths it reads. Episode 0: v(S) = 1 iff S holds path_a,
    # path_b or the judge (each reads 12); path_c never changes v: a null player, phi 0. The other
    # three are symmetric and share v(N) - v(empty) = 1: phi = [1/3, 1/3, 0, 1/3]. Episode 1: every
    # answer read is 13 (wrong): v = 0, phi = 0.
    batch = CreditBatch((right, wrong), ARITH_ITEM, ARITH.score, ARITH.extract,
                        CreditResources(judge=FakeJudge(majority_judge)))
    options = {"value": "judge", "mode": "mean_only", "judge_template": TEMPLATE, "judge_max_new_tokens": 16}
    phi = agent_shapley(batch, parse_options(get_credit("shapley"), options))
    assert phi == pytest.approx(np.array([[1 / 3, 1 / 3, 0, 1 / 3], [0, 0, 0, 0]]), abs=1e-12)
    # mean_only: A_{g,i} = n (phi_{g,i} - mean_g phi_{g,i}) = 4 (1/3 - 1/6) = 2/3 and -2/3, path_c 0;
    # one message per agent carries its agent's advantage
    adv = assign("shapley", batch, options)
    assert np.array(adv) == pytest.approx(np.array([[2 / 3, 2 / 3, 0, 2 / 3], [-2 / 3, -2 / 3, 0, -2 / 3]]),
                                          abs=1e-12)

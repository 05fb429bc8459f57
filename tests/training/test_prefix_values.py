"""The credit oracle on scripted teams, where the true advantages are known.

A solver answers, a ``noisy_teammate(q)`` replaces the answer with a wrong one with probability q:
``V = [(1 - q) p, (1 - q) c, R]``. With a deterministic solver (``truthful``: p = c = 1; ``wrong``:
p = c = 0) the closed form holds exactly on the recorded episodes; the Monte Carlo oracle
(re-execution from every prefix) must agree with it up to its sampling error.
"""

from __future__ import annotations

import pytest

from teamplay.agents.backends.mixed import MixedBackend
from teamplay.agents.backends.scripted import format_answer
from teamplay.agents.roles import Team
from teamplay.config import ProtocolConfig
from teamplay.credit.audit.fidelity import advantages_from_values, noisy_teammate_values
from teamplay.envs.tasks import get_task
from teamplay.records import SamplingParams
from teamplay.training.play.prefix_values import PrefixValues, first_answer_accuracy
from teamplay.training.play.rollout import RolloutJob, RolloutRunner
from teamplay.training.wiring.envs import env_factory


def _team(solver: str, q: float):
    task = get_task("arith", level=1, max_operand=10)
    items = task.load("train", limit=6, seed=0)
    team = Team.model_validate({"roles": [{"name": "solver", "policy": f"scripted:{solver}"},
                                          {"name": "teammate", "policy": f"scripted:noisy_teammate(q={q})"}]})
    make_env, team = env_factory(task, ProtocolConfig(name="sequential"), team)
    backend = MixedBackend(None, team.scripted_roles(), seed=0)
    runner = RolloutRunner(make_env, backend, SamplingParams(max_new_tokens=8, temperature=1.0))
    return task, items, make_env, backend, runner


def _episodes(runner, items, group=4, seed=0):
    return runner.run([RolloutJob(item=it, group_id=f"g{k}") for k, it in enumerate(items) for _ in range(group)],
                      seed=seed)


@pytest.mark.parametrize("solver", ["truthful", "wrong"])
@pytest.mark.parametrize("q", [0.25, 0.5])
def test_closed_form_noisy_teammate_advantages_are_exact(solver: str, q: float) -> None:
    task, items, _, _, runner = _team(solver, q)
    episodes = _episodes(runner, items)

    def correct(ep, item) -> float:
        first = ep.messages[0]
        return 0.0 if first.answer is None else float(task.score(format_answer(first.answer), item))

    p = first_answer_accuracy(runner, items, samples=8, seed=1, correct=correct)
    c_expected = 1.0 if solver == "truthful" else 0.0
    assert set(p.values()) == {c_expected}  # a deterministic solver: p = c exactly
    by_id = {it.id: it for it in items}
    replaced = 0
    for ep in episodes:
        c = correct(ep, by_id[ep.problem_id])
        assert c == c_expected
        adv = advantages_from_values(noisy_teammate_values(c, p[ep.problem_id], q, float(ep.reward)))
        # the solver's answer was certain: it changes nothing in expectation
        assert adv[0] == pytest.approx(0.0, abs=1e-9)
        # the teammate: R - (1 - q) c; a right answer kept earns q, one replaced loses 1 - q
        expected = (q if ep.reward == 1.0 else -(1.0 - q)) if c == 1.0 else 0.0
        assert adv[1] == pytest.approx(expected, abs=1e-9)
        replaced += ep.messages[1].answer != ep.messages[0].answer
    if solver == "truthful":  # (a wrong solver's answer is the wrong answer the teammate would give)
        assert 0 < replaced < len(episodes)  # the teammate's coin did both things


def test_monte_carlo_oracle_agrees_with_the_closed_form() -> None:
    q, samples = 0.25, 1500
    _, items, make_env, backend, runner = _team("noisy_proposer(p_right=0.5)", q)
    items = items[:2]
    episodes = _episodes(runner, items, group=3)
    oracle = PrefixValues(make_env, backend, SamplingParams(max_new_tokens=8, temperature=1.0),
                          samples=samples, seed=11)
    values = oracle.values(episodes, {it.id: it for it in items})
    # standard error of a mean of 1500 Bernoulli draws is at most 0.013; 0.05 is about 4 of them
    for ep, v in zip(episodes, values, strict=True):
        c = float(ep.messages[0].answer == next(it.reference for it in items if it.id == ep.problem_id))
        exact = noisy_teammate_values(c, 0.5, q, float(ep.reward))
        assert v.shape == (3,)
        assert v[2] == float(ep.reward)  # exact: the reward, copied
        assert v[1] == pytest.approx(exact[1], abs=0.05)
        assert v[0] == pytest.approx(exact[0], abs=0.05)
    # the empty prefix is estimated once per problem and shared by its episodes
    firsts = {ep.problem_id: v[0] for ep, v in zip(episodes, values, strict=True)}
    for ep, v in zip(episodes, values, strict=True):
        assert v[0] == firsts[ep.problem_id]  # exact: one estimate shared, copied
    assert oracle.generated_tokens == 0  # scripted agents generate no tokens


def test_noisy_teammate_restates_or_replaces_and_reviewers_follow_their_coins() -> None:
    from teamplay.agents.backends.scripted import POLICY_OPTIONS, ScriptedBackend, parse_policy
    from teamplay.errors import ConfigError

    assert parse_policy("noisy_teammate(q=0.3)") == ("noisy_teammate", {"q": 0.3})  # exact: the parsed literal 0.3
    assert "p_right" in POLICY_OPTIONS["noisy_reviewer"]
    with pytest.raises(ConfigError, match="out of range"):
        parse_policy("noisy_teammate(q=2)")
    assert ScriptedBackend("approver").policy_name == "approver"


def test_oracle_refuses_zero_samples() -> None:
    _, _, make_env, backend, _ = _team("truthful", 0.5)
    with pytest.raises(ValueError, match="samples must be >= 1"):
        PrefixValues(make_env, backend, SamplingParams(), samples=0)

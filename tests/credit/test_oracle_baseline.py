"""The additive ``oracle`` with a per-agent baseline of more samples (``baseline_samples: M``).

The group of ``tests/credit/test_oracle.py`` (K = 4 solvers on one 4-tuple, G = 4 episodes)::

    c = [[1, 0, 1, 1],      column means 0.75, 0.75, 0.75, 0.5
         [1, 1, 1, 1],
         [0, 1, 0, 0],
         [1, 1, 1, 0]]

The plain oracle's scale: sigma^2 = sum of the squared group-centred c over n (G - ddof) = (0.75 +
0.75 + 0.75 + 1.0) / 16 = 3.25 / 16 (each of the first three columns: 3 x 0.25^2 + 0.75^2).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from teamplay.agents.backends.scripted import ScriptedBackend
from teamplay.config import ProtocolConfig
from teamplay.credit import CreditBatch, CreditResources, assign
from teamplay.credit.methods.oracle import OracleOptions
from teamplay.credit.registry import check_credit, get_credit
from teamplay.credit.values.replay_query import ReplayQuery
from teamplay.envs.tasks.catalog.tuples import TupleTask
from teamplay.errors import ConfigError, DataError
from teamplay.records import SamplingParams
from teamplay.training.play.replay import RolloutReplayEngine
from teamplay.training.play.rollout import RolloutJob, RolloutRunner
from teamplay.training.wiring.envs import env_factory
from tests.credit.test_oracle import K, policy, split_group

SIGMA = np.sqrt(3.25 / 16)  # the plain oracle's pooled std of this group (module docstring)


class FixedReplays:
    """A stand-in replay engine: agent a's replays alone score ``rewards[a]`` (team rewards, c' / K);
    every query it is asked is kept in ``asked``."""

    def __init__(self, rewards: dict[str, list[float]]) -> None:
        self.rewards = rewards
        self.asked: list[tuple] = []

    def scores(self, queries, samples, budget):
        self.asked.extend((q.episode, q.kept, q.start, q.removal, samples) for q in queries)
        return [np.array(self.rewards[next(iter(q.kept))]) for q in queries]


def with_engine(batch, engine):
    return CreditBatch(episodes=batch.episodes, item=batch.item, score=batch.score, extract=batch.extract,
                       resources=CreditResources(replay=engine))


def test_no_extra_samples_is_the_plain_oracle_exactly():
    batch, c = split_group()
    assert get_credit("oracle").requires(OracleOptions()) == frozenset()  # no replay resource asked
    plain = assign("oracle", batch, {"form": "additive"})
    zero = assign("oracle", batch, {"form": "additive", "baseline_samples": 0})
    # agent 0 speaks message 0 of each episode: c = [1, 1, 0, 1], mean 0.75, divided by SIGMA
    expected = [(1 - 0.75) / SIGMA, (1 - 0.75) / SIGMA, (0 - 0.75) / SIGMA, (1 - 0.75) / SIGMA]
    assert [float(a[0]) for a in zero] == expected  # exact: quarters, and one sqrt of the same 3.25 / 16
    for a, b in zip(plain, zero, strict=True):
        assert a.tolist() == b.tolist()  # exact: the same computation


def test_replayed_baseline_worked_numbers():
    batch, c = split_group()
    # agent 0's 4 replays alone: right once (team reward 1/K = 0.25), so c' = [1, 0, 0, 0];
    # p^_0 = (3 own right + 1 replayed right) / (4 + 4) = 0.5. The other agents' replays: all right.
    replays = {"solver_0": [0.25, 0.0, 0.0, 0.0], **{f"solver_{j}": [0.25] * 4 for j in (1, 2, 3)}}
    engine = FixedReplays(replays)
    options = {"form": "additive", "baseline_samples": 4}
    adv = assign("oracle", with_engine(batch, engine), {**options, "mode": "mean_only"})
    # one query per agent: the group's first episode, that agent kept, from the question, the others skipped
    assert {(id(e), start, removal, m) for e, _, start, removal, m in engine.asked} == {
        (id(batch.episodes[0]), 0, "skip", 4)}
    assert [tuple(kept) for _, kept, *_ in engine.asked] == [(f"solver_{j}",) for j in range(K)]
    # mean_only: c - p^ = [1, 1, 0, 1] - 0.5
    assert [float(a[0]) for a in adv] == [0.5, 0.5, -0.5, 0.5]  # exact: halves
    # solver_1 (c = [0, 1, 1, 1]) with p^ = (3 + 4) / 8 = 0.875: right every replay, so its right
    # answers are barely reinforced and its wrong one pushed down hard
    assert [float(a[1]) for a in adv] == [-0.875, 0.125, 0.125, 0.125]  # exact: eighths
    # the advantages no longer sum to 0 over the group: agent 0 sums to 4 (0.75 - 0.5) = 1
    assert sum(float(a[0]) for a in adv) == 1.0  # exact: halves
    # mode std: the same shifted credit over the plain oracle's own SIGMA; the difference from the
    # plain oracle is the baseline alone: (mean_g c - p^) / SIGMA = (0.75 - 0.5) / SIGMA for agent 0
    std = assign("oracle", with_engine(batch, engine), options)
    plain = assign("oracle", batch, {"form": "additive"})
    for a, b in zip(std, plain, strict=True):
        np.testing.assert_allclose(a[0] - b[0], 0.25 / SIGMA, rtol=0, atol=1e-15)  # a few ulp of 0.5
        np.testing.assert_allclose(a[1] - b[1], (0.75 - 0.875) / SIGMA, rtol=0, atol=1e-15)


def test_an_always_right_agent_is_still_credited_when_its_replays_are_not():
    # a group in which solver_0 is right every time: the plain oracle gives it 0 (its centred A* from
    # 4 samples); with replays right half the time p^_0 = (4 + 2) / 8 = 0.75 and it is reinforced
    wrong = [{"solver_1"}, set(), {"solver_2", "solver_3"}, {"solver_3"}]
    batch, c = split_group(wrong=wrong)
    assert c[:, 0].tolist() == [1, 1, 1, 1]  # exact: 0/1 scores
    plain = assign("oracle", batch, {"form": "additive"})
    assert all(float(a[0]) == 0.0 for a in plain)  # exact: a constant column centres to exact zeros
    engine = FixedReplays({"solver_0": [0.25, 0.0, 0.25, 0.0], **{f"solver_{j}": [0.0] * 4 for j in (1, 2, 3)}})
    adv = assign("oracle", with_engine(batch, engine), {"form": "additive", "baseline_samples": 4,
                                                         "mode": "mean_only"})
    assert [float(a[0]) for a in adv] == [0.25] * 4  # exact: 1 - 0.75


@settings(max_examples=25, deadline=None)
@given(st.lists(st.frozensets(st.sampled_from([f"solver_{j}" for j in range(K)])), min_size=2, max_size=5),
       st.lists(st.integers(0, 4), min_size=K, max_size=K), st.integers(1, 6))
def test_baseline_is_the_pooled_mean_and_tends_to_the_true_accuracy(wrong, right_of_4, repeats):
    # the engine returns answers of agent j with accuracy exactly p_j = right_of_4[j] / 4 (M = 4 x
    # repeats samples); p^ is read back from the mean_only advantages (A = c - p^)
    batch, c = split_group(wrong=wrong)
    p = np.array(right_of_4) / 4
    replayed = {f"solver_{j}": ([1.0] * r + [0.0] * (4 - r)) * repeats for j, r in enumerate(right_of_4)}
    engine = FixedReplays({a: [s / K for s in scores] for a, scores in replayed.items()})
    M, G = 4 * repeats, c.shape[0]
    adv = np.array([a for a in assign("oracle", with_engine(batch, engine),
                                      {"form": "additive", "baseline_samples": M, "mode": "mean_only"})])
    p_hat = c - adv  # [G, K]: the same p^ in every episode
    for j in range(K):
        pooled = np.mean(np.concatenate([c[:, j], replayed[f"solver_{j}"]]))
        # rounding: c - (c - p^) moves p^ (a mean of <= 29 terms in [0, 1]) by a few ulp of 1
        np.testing.assert_allclose(p_hat[:, j], pooled, rtol=0, atol=1e-12)
        # p^ = (G mean_g c + M p) / (G + M): |p^ - p| = G |mean_g c - p| / (G + M), -> 0 as M grows
        assert abs(p_hat[0, j] - p[j]) <= G / (G + M) * abs(c[:, j].mean() - p[j]) + 1e-12


def test_extra_samples_need_the_additive_form_and_the_replay_resource():
    batch, _ = split_group("all")
    for form in ("conjunctive", "spoiler", "relay", "majority", "review"):
        with pytest.raises(ConfigError, match=r"^credit\.options\.baseline_samples: .*needs form 'additive'"):
            assign("oracle", batch, {"form": form, "baseline_samples": 4})
    assert get_credit("oracle").requires(OracleOptions(baseline_samples=2)) == frozenset({"replay"})
    with pytest.raises(ConfigError, match="needs the resource replay"):
        check_credit("oracle", {"baseline_samples": 2}, "split", frozenset())
    batch, _ = split_group()
    with pytest.raises(ValueError, match="baseline_samples > 0 needs the 'replay' resource"):
        assign("oracle", batch, {"baseline_samples": 2})


def test_a_replay_worth_more_than_one_agent_is_refused():
    batch, _ = split_group()
    engine = FixedReplays({f"solver_{j}": [0.5] for j in range(K)})  # 0.5 > 1/K: not one agent's answer
    with pytest.raises(DataError, match=r"replay of solver_0 alone scored 0.5, above 1/K = 0.25"):
        assign("oracle", with_engine(batch, engine), {"baseline_samples": 1})


def split_engine(policy):
    """(runner, engine, item) of the real rollout runner and replay engine on a K-solver split."""
    task = TupleTask("arith", k=K, options={"level": 1})
    item = task.load("test", limit=1)[0]
    make_env, _ = env_factory(task, ProtocolConfig(name="split", options={"n_agents": K}), None)
    sampling = SamplingParams(max_new_tokens=8, temperature=1.0)
    runner = RolloutRunner(make_env, ScriptedBackend(policy), sampling)
    return runner, RolloutReplayEngine(make_env, ScriptedBackend(policy), sampling), task, item


def test_the_real_engine_scores_an_agent_alone_c_over_k_on_split():
    # solver_1 always answers wrong, the others right: a replay of solver_j alone (from the question,
    # the others skipped) scores its own answer / K in every sample
    runner, engine, _, item = split_engine(policy({"solver_1"}))
    (ep,) = runner.run([RolloutJob(item=item, group_id="g")], seed=0)
    assert ep.reward == 0.75  # exact: 3 of 4 right, quarters
    engine.begin_step(0, rollout_tokens=100)
    queries = [ReplayQuery(ep, item, frozenset({a}), start=0, removal="skip") for a in ep.agents]
    scores = engine.scores(queries, samples=2, budget=None)
    assert [s.tolist() for s in scores] == [[0.25, 0.25], [0.0, 0.0], [0.25, 0.25], [0.25, 0.25]]  # exact: c / 4
    assert engine.stats.episodes == 2 * K  # every sample replayed (scripted text has no tokens to count)


def test_the_method_pools_the_real_engines_replays():
    # solver_j is right in an episode when (episode seed + j) is even, so recordings and replays
    # (fresh seeds per sample) differ; p^ read back from the mean_only advantages is the pooled mean
    def coin(request):
        ref = int(request.item.reference)
        right = (request.seed + int(request.agent[-1])) % 2 == 0
        return f"The answer is {ref if right else ref + 1}."

    runner, engine, task, item = split_engine(coin)
    episodes = runner.run([RolloutJob(item=item, group_id="g")] * 4, seed=1)
    engine.begin_step(0, rollout_tokens=100)
    batch = CreditBatch(episodes=tuple(episodes), item=item, score=task.score, extract=task.extract,
                        resources=CreditResources(replay=engine))
    adv = assign("oracle", batch, {"form": "additive", "baseline_samples": 3, "mode": "mean_only"})
    c = np.array([[ep.agent_correct[a] for a in ep.agents] for ep in episodes])  # [G, K]
    values = engine.coalition_values(episodes[0])
    assert len(values) == K and all(v["samples"] == 3 and v["start"] == 0 for v in values)
    for v in values:
        (agent,) = v["kept"]
        j = int(agent[-1])
        # every replay reward is 0 or 1/K: agent j's own score over K, the skipped turns scoring 0
        assert v["value"] * K * 3 == pytest.approx(round(v["value"] * K * 3), abs=1e-9)
        p_hat = (c[:, j].sum() + 3 * K * v["value"]) / (len(episodes) + 3)
        np.testing.assert_allclose([a[j] for a in adv], c[:, j] - p_hat, rtol=0, atol=1e-12)
    assert {v["value"] for v in values} - {0.0} != set()  # some replayed agent was right

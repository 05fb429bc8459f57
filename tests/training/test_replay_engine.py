"""The replay engine on scripted teams: prefix reuse, removals, common random numbers, cache, budget,
and continuation values against analytic ones."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from teamplay.config import ProtocolConfig
from teamplay.credit.methods.continuation import boundaries, continuation_advantages
from teamplay.credit.values.replay_query import ReplayQuery
from teamplay.envs.tasks import get_task
from teamplay.records import Generation, SamplingParams
from teamplay.training.play.replay import RolloutReplayEngine, resolve
from teamplay.training.play.rollout import RolloutJob, RolloutRunner
from teamplay.training.wiring.envs import env_factory
from tests.training.scripted_team import CatchingReviewer, TeamScript
from tests.training.test_replay_credit import ITEM, review

TASK = get_task("arith")
PR = ("proposer_0", "reviewer_0")


def setup(backend, rounds: int = 3):
    make_env, _ = env_factory(TASK, ProtocolConfig(name="proposer_reviewer", options={"rounds": rounds}), None)
    sampling = SamplingParams(max_new_tokens=8, temperature=1.0)
    return RolloutRunner(make_env, backend, sampling), RolloutReplayEngine(make_env, backend, sampling)


def record(runner, n: int, seed: int = 0):
    return runner.run([RolloutJob(item=ITEM, group_id="g")] * n, seed=seed)


def test_prefix_reuse_and_free_queries():
    runner, engine = setup(TeamScript(["wrong"], review))
    (ep,) = record(runner, 1)
    assert resolve(ReplayQuery(ep, ITEM, frozenset(PR))).free  # the grand coalition is the recording
    no_reviewer = resolve(ReplayQuery(ep, ITEM, frozenset({"proposer_0"})))
    assert (no_reviewer.prefix, no_reviewer.free) == (1, False)  # the first proposal is reused
    assert resolve(ReplayQuery(ep, ITEM, frozenset({"reviewer_0"}))).prefix == 0
    assert resolve(ReplayQuery(ep, ITEM, frozenset(PR), start=2)).prefix == 2
    assert resolve(ReplayQuery(ep, ITEM, frozenset({"proposer_0"})), reuse_prefix=False).prefix == 0
    # a reviewer alone cannot give the team's answer: 0 without generation, unless the base model
    # plays the removed proposer
    alone = resolve(ReplayQuery(ep, ITEM, frozenset({"reviewer_0"})), answering=frozenset({"proposer_0"}))
    assert alone.free and alone.zero and alone.known_value == 0.0
    based = ReplayQuery(ep, ITEM, frozenset({"reviewer_0"}), removal="base_policy")
    assert not resolve(based, answering=frozenset({"proposer_0"})).free


def test_removals_and_one_batch_for_all_queries():
    calls: list[list[str | None]] = []

    class Recording(TeamScript):
        def generate(self, requests, sampling):
            calls.append([r.adapter for r in requests])
            return super().generate(requests, sampling)

    backend = Recording(["wrong", "right"], review)
    runner, engine = setup(backend)
    episodes = record(runner, 2)
    calls.clear()
    engine.begin_step(0, rollout_tokens=100)
    queries = [ReplayQuery(ep, ITEM, frozenset({a}), removal=removal)
               for ep in episodes for a in PR for removal in ("skip", "null_message", "base_policy")]
    scores = engine.scores(queries, samples=1, budget=None)
    # 12 queries, one lock-step run: as many generate calls as turns still to play (<= 3)
    assert len(calls) <= 3
    # base_policy: the removed role's turns were asked of the base model (adapter None)
    assert any(None in c for c in calls) and any("reviewer" in c for c in calls)
    by = {(id(q.episode), tuple(q.kept), q.removal): float(s[0]) for q, s in zip(queries, scores, strict=True)}
    e0, e1 = (id(ep) for ep in episodes)
    # e0 (13, WRONG -> 12): without the reviewer the wrong proposal stands (skip and null_message)
    assert by[(e0, ("proposer_0",), "skip")] == by[(e0, ("proposer_0",), "null_message")] == 0.0
    # without the proposer there is no answer, whatever the removal (base proposer's text: scripted)
    assert by[(e0, ("reviewer_0",), "skip")] == by[(e0, ("reviewer_0",), "null_message")] == 0.0
    # e1 (12, wrongly WRONG -> 13): without the reviewer the right answer stands
    assert by[(e1, ("proposer_0",), "skip")] == 1.0
    # cached: asking again generates nothing
    n = len(calls)
    engine.scores(queries, samples=1, budget=None)
    assert len(calls) == n


def test_common_random_numbers_one_seed_per_sample_index():
    seeds: list[int | None] = []

    class Seeds(TeamScript):
        def generate(self, requests, sampling):
            seeds.append(sampling.seed)
            return super().generate(requests, sampling)

    runner, engine = setup(Seeds(["wrong"], review))
    (ep,) = record(runner, 1)
    engine.begin_step(5, rollout_tokens=100)
    seeds.clear()
    engine.scores([ReplayQuery(ep, ITEM, frozenset({"proposer_0"}))], samples=2, budget=None)
    first = list(seeds)
    seeds.clear()
    # another coalition, another call, same step: sample j runs with the same seeds as before
    engine.scores([ReplayQuery(ep, ITEM, frozenset(PR), start=1)], samples=2, budget=None)
    # without the reviewer one turn is generated per sample, from prefix 1 two turns: sample j's
    # run starts from the same seed in both calls (the runner then offsets it per lock-step turn)
    assert len(first) == 2 and len(seeds) == 4
    assert (first[0], first[1]) == (seeds[0], seeds[2]) and first[0] != first[1]


def test_budget_uses_fewer_samples_and_says_so(caplog):
    class Tokens(TeamScript):  # every generated message costs 10 tokens
        def generate(self, requests, sampling):
            return [Generation(text=g.text, completion_ids=(1,) * 10, adapter=g.adapter)
                    for g in super().generate(requests, sampling)]

    runner, engine = setup(Tokens(["wrong"], review))
    (ep,) = record(runner, 1)
    assert ep.tokens == 30
    engine.begin_step(0, rollout_tokens=ep.tokens)
    query = ReplayQuery(ep, ITEM, frozenset({"proposer_0"}))  # replays 1 turn (10 tokens) per sample
    with caplog.at_level(logging.WARNING, logger="teamplay.replay"):
        (scores,) = engine.scores([query], samples=8, budget=1.0)  # cap 30 tokens: 3 samples fit
    assert scores.size == 3 and engine.stats.extra_tokens == 30 and engine.stats.capped
    assert "3 of 8 samples" in caplog.text


def test_continuation_value_matches_the_analytic_value():
    # compliant proposer, wrong first answer; the reviewer catches it with probability 0.8:
    # V(1) (after the wrong proposal) = 0.8, V(2) = 1 after a WRONG review and 0 after RIGHT
    reviewer = CatchingReviewer(0.8, seed=1)
    runner, engine = setup(TeamScript(["wrong"], reviewer))
    episodes = record(runner, 6)
    engine.begin_step(0, rollout_tokens=1)
    k = 400
    queries = [ReplayQuery(ep, ITEM, frozenset(PR), start=t) for ep in episodes for t in (0, 1, 2)]
    scores = engine.scores(queries, samples=k, budget=None)
    v1 = np.concatenate([s for q, s in zip(queries, scores, strict=True) if q.start == 1])
    se = np.sqrt(0.8 * 0.2 / v1.size)
    assert abs(v1.mean() - 0.8) < 3 * se, (v1.mean(), se)
    for ep in episodes:
        got = {q.start: float(s.mean()) for q, s in zip(queries, scores, strict=True) if q.episode is ep}
        caught = ep.messages[1].text == "WRONG"
        assert got[2] == (1.0 if caught else 0.0)  # exact: deterministic after the review: equal 0/1 scores
        values = [got[t] for t in boundaries(ep)]
        assert float(continuation_advantages(ep, values).sum()) == pytest.approx(ep.reward - got[0], abs=1e-9)

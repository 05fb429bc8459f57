"""The ``review`` protocol (one proposal, one review whose corrected answer the team adopts): the
scripted proposer of known error rate with a reviewer through the runner, every review outcome and
its count, what the reviewer is asked, masking, both team forms, and the oracle's ``review`` form.
PettingZoo's checkers run in ``test_api_conformance.py``."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from teamplay.agents.backends.mixed import MixedBackend
from teamplay.agents.backends.scripted import ScriptedBackend
from teamplay.agents.roles import Role, Team
from teamplay.config import TrainConfig, build_config
from teamplay.credit import CreditBatch, assign
from teamplay.credit.methods.oracle import OracleOptions, oracle_values
from teamplay.envs.protocols import get_protocol
from teamplay.envs.protocols.verdicts import review_outcome
from teamplay.envs.team_env import TeamEnv
from teamplay.errors import ConfigError, DataError
from teamplay.records import SamplingParams
from teamplay.training.play.rollout import RolloutJob, RolloutRunner
from tests.envs.fakes import ITEMS, FakeTask, play

ITEM = ITEMS[2]  # reference "5"
RIGHT, WRONG = ITEM.reference, str(int(ITEM.reference) + 1)


def team_of(proposal: str, review: str):
    """A policy: the proposer states ``proposal``, the reviewer replies ``review``."""
    return lambda request: f"The answer is {proposal}." if request.stage == "propose" else review


def episode(proposal: str, review: str, seed: int = 0):
    return play(TeamEnv(FakeTask(), "review", items=ITEMS), team_of(proposal, review), seed=seed, item=ITEM,
                group_id="g")


def truthful_reviewer(request):
    """Says RIGHT of a right proposal; WRONG with the reference otherwise (a reviewer that fixes)."""
    if request.metadata["pending_answer"] == request.item.reference:
        return "Verdict: RIGHT"
    return f"Verdict: WRONG\nThe answer is {request.item.reference}."


def test_a_noisy_proposer_is_right_at_its_rate_and_a_fixing_reviewer_makes_every_team_right():
    backend = MixedBackend(ScriptedBackend(truthful_reviewer), {"proposer": "noisy_proposer(p_right=0.6)"}, seed=0)
    runner = RolloutRunner(lambda: TeamEnv(FakeTask(), "review", items=ITEMS), backend, SamplingParams())
    jobs = [RolloutJob(item=item, group_id=item.id) for item in ITEMS for _ in range(50)]  # 300 episodes
    episodes = runner.run(jobs, seed=0)
    proposals = [ep.metadata["review"]["proposal"] for ep in episodes]
    right = [p == job.item.reference for p, job in zip(proposals, jobs, strict=True)]
    # 300 Bernoulli(0.6) draws: sd sqrt(300 * 0.24) = 8.5, so 180 +- 3 sd is 155..205
    assert 155 <= sum(right) <= 205
    # every wrong proposal is off by one
    assert all(p == str(int(j.item.reference) + 1) for p, ok, j in zip(proposals, right, jobs, strict=True) if not ok)
    assert all(ep.reward == 1.0 for ep in episodes)  # exact: the reviewer fixes every wrong proposal
    outcomes = [ep.metadata["review"]["outcome"] for ep in episodes]
    assert outcomes == ["kept" if ok else "adopted" for ok in right]
    # seeded per request: the same run gives the same proposals
    assert [ep.metadata["review"]["proposal"] for ep in runner.run(jobs, seed=0)] == proposals


def test_a_noisy_proposer_with_a_spread_is_off_by_a_nonzero_amount_up_to_it():
    backend = MixedBackend(ScriptedBackend(truthful_reviewer), {"proposer": "noisy_proposer(p_right=0.6, spread=3)"})
    runner = RolloutRunner(lambda: TeamEnv(FakeTask(), "review", items=ITEMS), backend, SamplingParams())
    jobs = [RolloutJob(item=item, group_id=item.id) for item in ITEMS for _ in range(50)]
    offsets = [int(ep.metadata["review"]["proposal"]) - int(job.item.reference)
               for ep, job in zip(runner.run(jobs, seed=0), jobs, strict=True)]
    # about 120 wrong proposals over 6 offsets: each of -3..3 but 0 occurs (P(an offset missing) < 6 * (5/6)^120)
    assert set(offsets) == {-3, -2, -1, 0, 1, 2, 3}
    assert 155 <= offsets.count(0) <= 205  # the coin is the one without spread: 180 +- 3 sd
    with pytest.raises(ConfigError, match="spread=0 is out of range"):
        ScriptedBackend("noisy_proposer(spread=0)")


@pytest.mark.parametrize(("proposal", "review", "outcome", "final"), [
    (WRONG, f"Verdict: WRONG\n2 + 3 is 5. The answer is {RIGHT}.", "adopted", RIGHT),     # a correction
    (RIGHT, f"Verdict: WRONG\nThe answer is {WRONG}.", "adopted", WRONG),                  # a harm
    (WRONG, "**Verdict: RIGHT**", "kept", WRONG),                                           # a miss
    (RIGHT, f"Verdict: RIGHT\nThe answer is {WRONG}.", "kept", RIGHT),                     # RIGHT keeps
    (WRONG, "Verdict: WRONG", "no_answer", WRONG),                                          # malformed
    (WRONG, f"I think the answer is {RIGHT}.", "no_verdict", WRONG),                        # malformed
])
def test_each_review_outcome_sets_the_team_answer_and_is_counted(proposal, review, outcome, final):
    ep = episode(proposal, review)
    assert ep.metadata["review"]["outcome"] == outcome and ep.final_answer == final
    assert ep.metadata["initial_answer"] == proposal  # the proposal, before the review
    assert ep.reward == float(final == RIGHT)  # exact: 0/1 scores
    # exact: 0/1 scores
    assert ep.agent_correct == {"proposer_0": float(proposal == RIGHT), "reviewer_0": ep.reward}


def test_the_reviewer_is_asked_for_a_verdict_and_a_corrected_answer():
    env = TeamEnv(FakeTask(), "review", items=ITEMS)
    env.reset(seed=0, options={"item": ITEM})
    env.step(f"I add 2 and 3 wrongly. The answer is {WRONG}.")
    request = env.infos["reviewer_0"]["turn"]
    assert request.expects == "verdict" and request.reply_prefix == "Verdict:"
    assert request.metadata["pending_answer"] == WRONG
    assert [m.agent for m in request.transcript] == ["proposer_0"]
    instruction = request.chat[-1].content
    assert WRONG in instruction and "Verdict: RIGHT" in instruction and "Verdict: WRONG. The answer is" in instruction
    assert "RIGHT or WRONG" in request.chat[0].content  # the system prompt says it too
    assert review_outcome(None) == "no_verdict"


def test_masking_keeps_the_proposal_without_the_review_and_the_correction_without_the_proposal():
    task = FakeTask()
    env = TeamEnv(task, "review", items=ITEMS)
    fixed = episode(WRONG, f"Verdict: WRONG\nThe answer is {RIGHT}.")
    score = lambda hidden: env.protocol.score_visible(task, ITEM, fixed.messages, hidden)  # noqa: E731
    assert [score([False, False]), score([False, True]), score([True, False]), score([True, True])] == [1, 0, 1, 0]
    approved = episode(RIGHT, "Verdict: RIGHT")
    # a RIGHT verdict on nothing is no answer: the approval alone is worth 0
    assert env.protocol.score_visible(task, ITEM, approved.messages, [True, False]) == 0.0


def test_both_team_forms_load_as_configs_and_refusals():
    roles = {"scripted": [{"name": "proposer", "policy": "scripted:noisy_proposer(p_right=0.6)"}, {"name": "reviewer"}],
             "trained": [{"name": "proposer"}, {"name": "reviewer"}]}
    scripted, trained = (build_config(TrainConfig, {"task": {"name": "arith"}, "protocol": {"name": "review"},
                                                    "team": {"roles": roles[k]},
                                                    "credit": {"method": "oracle", "options": {"form": "review"}}}).team
                         for k in ("scripted", "trained"))
    assert TeamEnv(FakeTask(), "review", scripted, items=ITEMS).possible_agents == ["proposer_0", "reviewer_0"]
    assert scripted.adapter_names() == ("reviewer",) and trained.adapter_names() == ("proposer", "reviewer")
    TeamEnv(FakeTask(), "review", trained, items=ITEMS)
    with pytest.raises(ConfigError, match="exactly 1"):
        TeamEnv(FakeTask(), "review", Team(roles=(Role(name="proposer", count=2), Role(name="reviewer"))),
                items=ITEMS)
    with pytest.raises(ConfigError, match="verdict_prefix"):
        get_protocol("review", verdict_prefix="RIGHT")
    with pytest.raises(ConfigError, match="review_instruction"):
        get_protocol("review", review_instruction="Check {proposal}.")


# ---- the oracle's review form ---------------------------------------------------------------------

def group(cases):
    """A CreditBatch of review episodes, one per (proposal, review) case."""
    return CreditBatch(episodes=tuple(episode(p, r, seed=g) for g, (p, r) in enumerate(cases)), item=ITEM)


FIX, MISS, KEEP = f"Verdict: WRONG\nThe answer is {RIGHT}.", "Verdict: RIGHT", "Verdict: RIGHT"


def test_oracle_review_form_worked_numbers():
    # proposals right, wrong, wrong, right; the reviewer fixes the first wrong one and misses the second
    batch = group([(RIGHT, KEEP), (WRONG, FIX), (WRONG, MISS), (RIGHT, KEEP)])
    assert [ep.reward for ep in batch.episodes] == [1.0, 1.0, 0.0, 1.0]
    u = oracle_values(batch, OracleOptions(form="review"))
    # reviewer: R - c_prop = [0, 1, 0, 0]; proposer: c_prop dV, dV = mean R | right (1) - | wrong (1/2)
    assert u.tolist() == [[0.5, 0.0], [0.0, 1.0], [0.0, 0.0], [0.5, 0.0]]  # exact: halves
    adv = assign("oracle", batch, {"form": "review", "mode": "mean_only"})
    # n (u - mean u) with n = 2: proposer 2 ([.5, 0, 0, .5] - .25), reviewer 2 ([0, 1, 0, 0] - .25);
    # the proposer's is 2 (V^(x) - mean R) with V^(1) = 1, V^(0) = 1/2, mean R = 3/4
    assert [a.tolist() for a in adv] == [[0.5, -0.5], [-0.5, 1.5], [-0.5, -0.5], [0.5, -0.5]]  # exact: quarters


CASES = [(RIGHT, KEEP), (RIGHT, f"Verdict: WRONG\nThe answer is {WRONG}."), (WRONG, FIX), (WRONG, MISS),
         (WRONG, "Verdict: WRONG")]
EPISODES = [episode(p, r) for p, r in CASES]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, len(CASES) - 1), min_size=2, max_size=10))
def test_oracle_review_form_is_a_star_up_to_a_term_of_the_proposal(picks):
    batch = CreditBatch(episodes=tuple(EPISODES[k] for k in picks), item=ITEM)
    u = oracle_values(batch, OracleOptions(form="review"))
    x = np.array([ep.agent_correct["proposer_0"] for ep in batch.episodes])
    r = np.array([ep.reward for ep in batch.episodes])
    v = np.array([r[x == xi].mean() for xi in x])  # V^(x): the group's mean R given the proposal's score
    centred = u - u.mean(axis=0)
    # proposer: the centred value is exactly V^(x) - mean R (sums of at most 10 numbers in [0, 1])
    np.testing.assert_allclose(centred[:, 0], v - r.mean(), rtol=0, atol=1e-12)
    # reviewer: centred value minus A*(review | x) = R - V^(x) depends on the proposal alone
    gap = centred[:, 1] - (r - v)
    for xi in set(x.tolist()):
        assert np.ptp(gap[x == xi]) <= 1e-12


def test_oracle_review_form_refuses_a_team_of_another_form():
    fixed = episode(WRONG, FIX)
    broken = replace(episode(WRONG, MISS), reward=1.0)  # kept a wrong proposal, yet the team is right
    with pytest.raises(DataError, match="R = c_prop"):
        oracle_values(CreditBatch(episodes=(fixed, broken), item=ITEM), OracleOptions(form="review"))
    vote = play(TeamEnv(FakeTask(), "vote", items=ITEMS), team_of(RIGHT, ""), item=ITEM)
    with pytest.raises(DataError, match="form 'review' needs the team of protocol review"):
        oracle_values(CreditBatch(episodes=(vote,), item=ITEM), OracleOptions(form="review"))

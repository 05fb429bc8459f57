"""Learned speak/skip controllers: values by hand, counterfactual turns, eval modes, learning, cost."""

from __future__ import annotations

import json

import numpy as np
import pytest
from pydantic import ValidationError

from teamplay.agents.backends.base import GenerationBackend
from teamplay.agents.backends.scripted import ScriptedBackend
from teamplay.config import ControllerConfig, EvalConfig, ProtocolConfig, TrainConfig, build_config
from teamplay.envs.protocols.base import TurnDecision, TurnSpec
from teamplay.errors import ConfigError
from teamplay.records import ControllerDecision, Episode, Generation, Message, SamplingParams, TurnRequest
from teamplay.training.experiments.controller_training import train_controllers
from teamplay.training.play.controllers import TeamControllers, speak_rates
from teamplay.training.play.rollout import RolloutJob, RolloutRunner
from teamplay.training.wiring.envs import env_factory
from tests.envs.fakes import ITEMS, FakeTask, truthful

REVIEW_STATE = ("controller", "vote_0", "last")  # the review of a 3-round dialogue (round 2 of 3)
PR3 = ProtocolConfig(name="proposer_reviewer", options={"rounds": 3})


def idx(request: TurnRequest) -> int:
    return int(request.item.id.rsplit("/", 1)[-1])


def team_policy(proposer_right, reviewer_truthful: bool):
    """Proposals right on items where ``proposer_right(i)``; reviews truthful or always inverted."""
    def policy(request: TurnRequest) -> str:
        ref = request.item.reference
        if request.stage == "review":
            ok = request.metadata["pending_answer"] == ref
            return "RIGHT" if ok == reviewer_truthful else "WRONG"
        if request.stage == "debate" and request.agent == "debater_2":
            return f"The answer is {int(ref) + 1}."  # debater_2 talks the team out of the right answer
        answer = ref if proposer_right(idx(request)) else str(int(ref) + 1)
        return f"The answer is {answer}."
    return policy


class CountingBackend(GenerationBackend):
    """A scripted policy that records each generate call and gives each word one token."""

    name = "counting"

    def __init__(self, policy) -> None:
        self.policy = policy
        self.calls: list[list[TurnRequest]] = []

    def generate(self, requests, sampling):
        self.calls.append(list(requests))
        out = []
        for r in requests:
            text = self.policy(r)
            n = len(text.split())
            out.append(Generation(text=text, completion_ids=tuple(range(n)), logprobs=(0.0,) * n,
                                  adapter=r.adapter))
        return out


def decision(rng_seed: int = 0, pending: str | None = "7", agent_round: int = 1) -> TurnDecision:
    request = TurnRequest(agent="reviewer_0", role="reviewer", stage="review", round=agent_round, chat=(),
                          metadata={"pending_answer": pending, "pending_agent": "proposer_0", "vote_score": 0})
    return TurnDecision(turn=TurnSpec("reviewer_0", "reviewer", "review", agent_round), rounds=3,
                        request=request, rng=np.random.default_rng(rng_seed))


# ---- config ---------------------------------------------------------------------------------------

def test_config_section_and_errors():
    cfg = build_config(TrainConfig, {"controllers": {"enabled": True, "price_per_call": 0.1}})
    assert cfg.controllers.enabled and cfg.controllers.mode == "average_greedy"
    assert cfg.controllers.stages == ("propose", "review", "debate")
    with pytest.raises(ConfigError, match="controllers.mode"):
        build_config(EvalConfig, {"controllers": {"mode": "loud"}})
    with pytest.raises(ConfigError, match="controllers.price_per_token"):
        build_config(EvalConfig, {"controllers": {"price_per_token": -1}})
    with pytest.raises(ValidationError):
        ControllerConfig(stages=("solve",))


def test_protocol_without_skippable_turns_refuses_controllers():
    ctrl = TeamControllers(ControllerConfig(enabled=True)).controller("train")
    with pytest.raises(ConfigError, match="controllers.enabled: protocol 'single' has no skippable"):
        env_factory(FakeTask(), ProtocolConfig(name="single"), None, controller=ctrl)


# ---- action values by hand -------------------------------------------------------------------------

def _msg(agent, stage, rnd, text="", answer=None, spoke=True, tokens=0):
    return Message(agent=agent, role=agent.rpartition("_")[0], round=rnd, stage=stage, text=text,
                   completion_ids=tuple(range(tokens)), answer=answer, spoke=spoke)


def _episode(messages, log):
    agents = tuple(sorted({m.agent for m in messages}))
    return Episode(problem_id="p", group_id="g", agents=agents, messages=tuple(messages), final_answer=None,
                   reward=0.0, decisions=tuple(ControllerDecision.from_dict(d) for d in log))


def test_action_values_and_updates_by_hand():
    # judge: "7" is right. Prices: 0.25 per call + 0.05 per token.
    ctrl = TeamControllers(ControllerConfig(enabled=True, price_per_call=0.25, price_per_token=0.05))
    s = ["controller", "vote_0", "not_last"]
    messages = [_msg("proposer_0", "propose", 0, "8", "8", tokens=2),
                _msg("reviewer_0", "review", 1, "WRONG because", None, tokens=4),
                _msg("proposer_0", "propose", 2, "so 7", "7", tokens=3),
                _msg("reviewer_0", "review", 3, spoke=False),
                _msg("proposer_0", "propose", 4, spoke=False),
                _msg("reviewer_0", "review", 5, spoke=False)]
    log = [
        # review spoke on pending "8" (wrong): WRONG is right -> +1 - (0.25 + 4*0.05) = 0.55; v(skip) = -1
        {"agent": "reviewer_0", "stage": "review", "round": 1, "spoke": True, "state": s, "mode": "train",
         "pending_answer": "8"},
        # refresh from "8" (wrong, -1) to "7" (+1 - 0.25 - 3*0.05 = 0.6)
        {"agent": "proposer_0", "stage": "propose", "round": 2, "spoke": True, "state": s, "mode": "train",
         "pending_answer": "8"},
        # skipped review of pending "7" (right): v(skip) = +1; counterfactual "RIGHT" (+1) with 1 token
        # -> 1 - 0.30 = 0.7
        {"agent": "reviewer_0", "stage": "review", "round": 3, "spoke": False, "state": s, "mode": "train",
         "pending_answer": "7", "counterfactual_text": "RIGHT", "counterfactual_answer": None,
         "counterfactual_tokens": 1},
        # keep: not simulated, both values signed("7") = +1
        {"agent": "proposer_0", "stage": "propose", "round": 4, "spoke": False, "state": s, "mode": "train",
         "pending_answer": "7"},
        # skipped review without a counterfactual: unvalued
        {"agent": "reviewer_0", "stage": "review", "round": 5, "spoke": False, "state": s, "mode": "train",
         "pending_answer": "7"},
    ]
    ep = _episode(messages, log)
    judge = lambda answer, _pid: answer == "7"  # noqa: E731
    values = [ctrl.action_values(e, ep, judge) for e in ep.decisions]
    np.testing.assert_allclose(values[0], [-1.0, 0.55], atol=1e-12)
    np.testing.assert_allclose(values[1], [-1.0, 0.6], atol=1e-12)
    np.testing.assert_allclose(values[2], [1.0, 0.7], atol=1e-12)
    np.testing.assert_allclose(values[3], [1.0, 1.0], atol=1e-12)
    assert values[4] is None

    stats = ctrl.learn([ep], judge)
    assert stats.updates == {"reviewer_0/review": 2, "proposer_0/propose": 2}
    assert stats.unvalued == 1 and stats.counterfactual_tokens == 1
    key = tuple(s)
    rev = ctrl.matcher("reviewer_0", "review")
    # review 1: σ=[.5,.5], baseline (-1+.55)/2 = -.225, regret [-.775, .775] -> σ=[0,1]
    # review 3: baseline = 0.7, regret [0.3, 0] -> Rsum [-.475, .775]
    np.testing.assert_allclose(rev.regret_sum(key), [-0.475, 0.775], atol=1e-12)
    np.testing.assert_allclose(rev.strategy_sum(key), [0.5, 1.5], atol=1e-12)
    prop = ctrl.matcher("proposer_0", "propose")
    # refresh: baseline (-1+.6)/2 = -.2, regret [-.8, .8] -> σ=[0,1]; keep: zero regret, Ssum += [0,1]
    np.testing.assert_allclose(prop.regret_sum(key), [-0.8, 0.8], atol=1e-12)
    np.testing.assert_allclose(prop.strategy_sum(key), [0.5, 1.5], atol=1e-12)


def test_debate_values_by_hand():
    ctrl = TeamControllers(ControllerConfig(enabled=True))
    s = ["debate", "agree_1_of_2", "last"]
    messages = [_msg("debater_0", "debate", 1, "so 8", "8"), _msg("debater_1", "debate", 1, spoke=False)]
    log = [{"agent": "debater_0", "stage": "debate", "round": 1, "spoke": True, "state": s, "mode": "train",
            "previous_answer": "7"},
           {"agent": "debater_1", "stage": "debate", "round": 1, "spoke": False, "state": s, "mode": "train",
            "previous_answer": "8", "counterfactual_text": "no idea", "counterfactual_answer": None,
            "counterfactual_tokens": 0}]
    ep = _episode(messages, log)
    judge = lambda answer, _pid: answer == "7"  # noqa: E731
    # debater_0: silent keeps the right "7" (+1); speaking said "8" (-1)
    np.testing.assert_allclose(ctrl.action_values(ep.decisions[0], ep, judge), [1.0, -1.0])
    # debater_1: silent keeps the wrong "8" (-1); speaking gives no answer, no vote: -1
    np.testing.assert_allclose(ctrl.action_values(ep.decisions[1], ep, judge), [-1.0, -1.0])


def test_learn_refuses_evaluation_decisions():
    log = [{"agent": "reviewer_0", "stage": "review", "round": 1, "spoke": True,
            "state": list(REVIEW_STATE), "mode": "average_greedy", "pending_answer": "7"}]
    ep = _episode([_msg("reviewer_0", "review", 1, "RIGHT")], log)
    with pytest.raises(ValueError, match="mode 'average_greedy'"):
        TeamControllers(ControllerConfig(enabled=True)).learn([ep], lambda a, p: True)


# ---- decisions in the env -------------------------------------------------------------------------

def _skip_reviews() -> TeamControllers:
    """Reviews decided (proposals always speak) by a table that skips: two updates [1, -1] give
    Rsum [1, -1] (σ = [1, 0]) and Ssum [.5,.5] + [1,0] = [1.5, .5] (σ̄ = [.75, .25])."""
    ctrl = TeamControllers(ControllerConfig(enabled=True, stages=("review",)))
    for _ in range(2):
        ctrl.matcher("reviewer_0", "review").update(REVIEW_STATE, [1.0, -1.0])
    return ctrl


def _run(ctrl, mode, backend, n=3):
    make_env, _ = env_factory(FakeTask(), PR3, None, controller=ctrl.controller(mode))
    runner = RolloutRunner(make_env, backend, sampling=SamplingParams())
    return runner.run([RolloutJob(item=ITEMS[i], group_id=str(i)) for i in range(n)], seed=0)


def test_training_skip_generates_a_counterfactual_in_the_same_batch():
    backend = CountingBackend(truthful)
    episodes = _run(_skip_reviews(), "train", backend)
    # 3 lock-step turns (propose, review, propose), each ONE generate call for the 3 episodes
    assert [len(c) for c in backend.calls] == [3, 3, 3]
    assert all(r.metadata.get("counterfactual") is True for r in backend.calls[1])
    assert not any(r.metadata.get("counterfactual") for c in (backend.calls[0], backend.calls[2]) for r in c)
    for ep in episodes:
        review = ep.messages[1]
        assert not review.spoke and review.text == "" and review.n_tokens == 0
        assert ep.calls == 2 and ep.metadata["skipped"] == 1
        [rev_entry] = [e for e in ep.decisions if e.stage == "review"]
        # truthful review "RIGHT\nThe answer is R." = 5 words = 5 tokens, outside the team's count
        assert rev_entry.counterfactual_text.startswith("RIGHT") and rev_entry.counterfactual_tokens == 5
        assert ep.counterfactual_tokens == 5
        assert ep.tokens == sum(m.n_tokens for m in ep.messages)
        # the skipped review is not in the transcript the second proposal sees
        assert all(m.stage != "review" for m in backend.calls[2][0].transcript)


def test_evaluation_skip_generates_nothing_and_learns_nothing():
    ctrl = _skip_reviews()
    before = json.dumps(ctrl.state_dict())
    backend = CountingBackend(truthful)
    episodes = _run(ctrl, "average_greedy", backend)
    assert [len(c) for c in backend.calls] == [3, 3]  # two proposal turns; the reviews are silent
    assert all(not e.has_counterfactual for ep in episodes for e in ep.decisions)
    assert speak_rates(episodes)["reviewer_0/review"] == 0.0
    assert json.dumps(ctrl.state_dict()) == before


def test_evaluation_modes():
    ctrl = TeamControllers(ControllerConfig(enabled=True))
    m = ctrl.matcher("reviewer_0", "review")
    # T2.1's trace gives Rsum [1,1], Ssum [.5,2.5]; then [1,-1] at σ=[.5,.5]: regret [1,-1]
    # -> Rsum [2,0] (current: always skip), Ssum [1,3] (average: speak with 3/4)
    for v in ([-1, 1], [1, 1], [1, -1], [1, -1]):
        m.update(REVIEW_STATE, v)
    np.testing.assert_allclose(m.strategy(REVIEW_STATE), [1.0, 0.0])
    np.testing.assert_allclose(m.average_strategy(REVIEW_STATE), [0.25, 0.75])
    assert ctrl.decide(decision(), "average_greedy").speak is True
    assert ctrl.decide(decision(), "current").speak is False
    assert ctrl.decide(decision(), "always_speak").speak is True
    assert ctrl.decide(decision(), "train").speak is False  # samples σ = [1, 0]
    assert ctrl.decide(decision(), "train").counterfactual is True
    assert ctrl.decide(decision(), "current").counterfactual is False
    draws = [ctrl.decide(decision(seed), "sample").speak for seed in range(400)]
    assert 0.68 < np.mean(draws) < 0.82  # 0.75 ± 3.3 sd of a binomial(400, 0.75)
    # a state never seen in training speaks in every evaluation mode and adds no table row
    unseen = decision(pending=None)
    for mode in ("average_greedy", "current", "sample"):
        assert ctrl.decide(unseen, mode).speak is True
    assert m.states() == [REVIEW_STATE]


# ---- learning with scripted teams ----------------------------------------------------------------

def _learn(policy, config: ControllerConfig, steps: int = 12, backend=None):
    ctrl = TeamControllers(config)
    history = train_controllers(ctrl, FakeTask(), PR3, backend or ScriptedBackend(policy), ITEMS, steps=steps,
                                problems_per_step=6)
    return ctrl, history


def test_always_wrong_reviewer_learns_to_stay_silent():
    # proposals right on even items: v(skip) = +1 there (-1 otherwise); the inverted review is always -1
    ctrl, history = _learn(team_policy(lambda i: i % 2 == 0, reviewer_truthful=False),
                           ControllerConfig(enabled=True))
    assert history[0]["speak_rate"]["reviewer_0/review"] > 0  # it starts at 1/2
    # exact: all positive regret on one action: 0 / r and r / r are exact
    assert ctrl.matcher("reviewer_0", "review").strategy(REVIEW_STATE)[1] == 0.0
    assert ctrl.speak_probability("reviewer_0", "review")[REVIEW_STATE] < 0.05
    assert all(h["speak_rate"]["reviewer_0/review"] == 0.0 for h in history[-5:])


def test_always_right_reviewer_with_wrong_proposals_learns_to_speak():
    # proposals wrong on 2 of 3 items: v(skip) averages -1/3, the truthful review is always +1
    ctrl, history = _learn(team_policy(lambda i: i % 3 == 0, reviewer_truthful=True),
                           ControllerConfig(enabled=True))
    # exact: all positive regret on one action: 0 / r and r / r are exact
    assert ctrl.matcher("reviewer_0", "review").strategy(REVIEW_STATE)[1] == 1.0
    assert ctrl.speak_probability("reviewer_0", "review")[REVIEW_STATE] > 0.95
    assert all(h["speak_rate"]["reviewer_0/review"] == 1.0 for h in history[-5:])


@pytest.mark.parametrize("prices", [{"price_per_call": 0.8}, {"price_per_token": 0.2}])
def test_a_price_on_speaking_lowers_the_speak_rate(prices):
    # proposals right on 5 of 6 items: E v(skip) = (5 - 1)/6 = 0.67 < v(speak) = 1 for free, but
    # 1 - 0.8 = 0.2 with a call price, and 1 - 4 tokens * 0.2 = 0.2 with a token price
    # (the truthful review "RIGHT/WRONG" is one word: CountingBackend gives it 1 token, so use 4 words)
    def policy(request):
        text = team_policy(lambda i: i != 1, reviewer_truthful=True)(request)
        return f"{text} I checked it." if request.stage == "review" else text

    free, _ = _learn(policy, ControllerConfig(enabled=True), backend=CountingBackend(policy))
    priced, history = _learn(policy, ControllerConfig(enabled=True, **prices), backend=CountingBackend(policy))
    p_free = free.speak_probability("reviewer_0", "review")[REVIEW_STATE]
    p_priced = priced.speak_probability("reviewer_0", "review")[REVIEW_STATE]
    assert p_free > 0.8 and p_priced < 0.2, (p_free, p_priced)
    assert history[-1]["speak_rate"]["reviewer_0/review"] == 0.0


def test_debater_that_talks_the_team_wrong_learns_silence():
    # round 0: everyone right. Debate rounds: debater_2 switches to a wrong answer (v(speak) = -1)
    # while staying silent keeps its right answer (v(skip) = +1); the others are indifferent.
    ctrl = TeamControllers(ControllerConfig(enabled=True))
    policy = team_policy(lambda i: True, reviewer_truthful=True)
    history = train_controllers(ctrl, FakeTask(), ProtocolConfig(name="debate", options={"rounds": 2}),
                                ScriptedBackend(policy), ITEMS, steps=10, problems_per_step=6)
    probs = ctrl.speak_probability("debater_2", "debate", average=False)
    # where its earlier answer agrees with both others (it is right), it never speaks again; the
    # states after it spoke wrongly (agree_0_of_2) have equal values (-1, -1) and stay undecided
    agreeing = {s: p for s, p in probs.items() if s[1] == "agree_2_of_2"}
    assert len(agreeing) == 2 and all(p == 0.0 for p in agreeing.values()), probs
    assert history[-1]["speak_rate"]["debater_2/debate"] == 0.0
    assert history[-1]["accuracy"] == 1.0  # silent, its right round-0 answer keeps voting


# ---- persistence ---------------------------------------------------------------------------------

def test_state_dict_round_trip_is_exact_and_errors_are_clear():
    ctrl, _ = _learn(team_policy(lambda i: i % 2 == 0, reviewer_truthful=False), ControllerConfig(enabled=True),
                     steps=3)
    data = json.loads(json.dumps(ctrl.state_dict()))
    copy = TeamControllers(ControllerConfig(enabled=True))
    copy.load_state_dict(data)
    assert copy.state_dict() == ctrl.state_dict()
    assert copy.keys() == ctrl.keys()
    with pytest.raises(ValueError, match="'tables' list"):
        copy.load_state_dict({"tabels": []})
    with pytest.raises(ValueError, match=r"tables\[0\] is malformed"):
        copy.load_state_dict({"tables": [{"agent": "a", "stage": "review"}]})

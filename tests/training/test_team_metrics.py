"""Team metrics on hand-built episodes: each number worked out by hand in the comments."""

from __future__ import annotations

import pytest

from teamplay.records import Episode, Message
from teamplay.training.play.team_metrics import team_metrics


def correct(answer, _problem_id):
    return answer == "5"


def review_episode(i: int, first: str, verdict: str | None, final: str) -> tuple[Episode, bool]:
    messages = (Message("proposer_0", "proposer", 0, "propose", f"\\boxed{{{first}}}", answer=first),
                Message("reviewer_0", "reviewer", 1, "review", verdict or "hmm"),
                Message("proposer_0", "proposer", 2, "propose", f"\\boxed{{{final}}}", answer=final))
    meta = {"verdicts": [{"round": 1, "agent": "reviewer_0", "verdict": verdict, "spoke": True,
                          "pending_answer": first, "pending_agent": "proposer_0"}]}
    ep = Episode(f"p{i}", f"g{i}", ("proposer_0", "reviewer_0"), messages, final, float(final == "5"),
                 metadata=meta)
    return ep, first == "5"


def test_review_metrics_worked_by_hand():
    # reference 5 everywhere; (first proposal, verdict, final answer):
    cases = [("5", "RIGHT", "5"),   # right kept           -> verdict right
             ("6", "WRONG", "5"),   # wrong caught, fixed  -> verdict right, corrected
             ("5", "WRONG", "6"),   # right rejected       -> verdict wrong, harmed
             ("6", None, "6"),      # no verdict           -> counted as not right
             ("6", "WRONG", "5")]   # wrong caught, fixed
    built = [review_episode(i, *c) for i, c in enumerate(cases)]
    out = team_metrics([e for e, _ in built], correct, [r for _, r in built])
    # first proposals right: cases 0 and 2 -> 2/5; the reviewer never answers, so it has no entry
    assert out["first_answer_accuracy"] == {"proposer": pytest.approx(2 / 5)}
    assert out["verdict_accuracy"] == pytest.approx(3 / 5)   # cases 0, 1, 4
    assert out["verdict_rate"] == pytest.approx(4 / 5)       # all but case 3
    assert out["wrong_caught"] == pytest.approx(2 / 3)       # wrong proposals 1, 3, 4; caught 1, 4
    assert out["right_rejected"] == pytest.approx(1 / 2)     # right proposals 0, 2; rejected 2
    assert out["correction_rate"] == pytest.approx(2 / 3)    # initially wrong 1, 3, 4; fixed 1, 4
    assert out["harm_rate"] == pytest.approx(1 / 2)          # initially right 0, 2; harmed 2
    assert "toward_majority" not in out  # no debate turns: the rate is absent, not 0


def test_debate_moves_toward_and_away_from_majority():
    agents = ("debater_0", "debater_1", "debater_2")
    rounds = [("5", "6", "6"),   # round 0: majority 6
              ("6", "5", "6"),   # round 1: d0 5->6 toward, d1 6->5 away, d2 stays
              ("6", "6", "6")]   # round 2 (majority of 6,5,6 is 6): d1 5->6 toward, others stay
    messages = tuple(Message(a, "debater", r, "answer" if r == 0 else "debate", f"\\boxed{{{x}}}", answer=x)
                     for r, answers in enumerate(rounds) for a, x in zip(agents, answers, strict=True))
    ep = Episode("p", "g", agents, messages, "6", 0.0)
    out = team_metrics([ep], correct, [False])
    # 6 revision turns (rounds 1 and 2, three debaters): 2 toward, 1 away
    assert out["toward_majority"] == pytest.approx(2 / 6)
    assert out["away_from_majority"] == pytest.approx(1 / 6)
    assert out["first_answer_accuracy"] == {"debater": pytest.approx(1 / 3)}  # only d0 started at 5
    assert out["correction_rate"] == 0.0 and "harm_rate" not in out  # exact: 0 of n; no initially right episode

"""The registered ``tracer_roles`` method: TRACER role rewards (§2.4) on proposer_reviewer episodes."""

from __future__ import annotations

import numpy as np
import pytest

from teamplay.credit.methods.tracer_roles import TracerRolesOptions, tracer_role_rewards, tracer_roles_credit
from teamplay.credit.registry import CreditBatch, assign
from teamplay.records import Episode, Message, TaskItem

ITEM = TaskItem(id="arith/0", prompt="2+2?", reference="4")


def score(text: str, item: TaskItem) -> float:
    """A stand-in verifier: the last token of the text is the answer."""
    words = text.split()
    return 1.0 if words and words[-1] == item.reference else 0.0


def msg(stage: str, text: str, answer: str | None, rnd: int, spoke: bool = True) -> Message:
    agent = "proposer_0" if stage == "propose" else "reviewer_0"
    return Message(agent=agent, role=agent[:-2], round=rnd, stage=stage, text=text if spoke else "",
                   answer=answer, spoke=spoke)


def ep(*messages: Message, reward: float = 0.0) -> Episode:
    return Episode(problem_id="arith/0", group_id="g", agents=("proposer_0", "reviewer_0"),
                   messages=messages, final_answer=None, reward=reward)


def batch(*episodes: Episode) -> CreditBatch:
    return CreditBatch(episodes=episodes, item=ITEM, score=score)


def test_raw_role_rewards():
    e = ep(msg("propose", "so it is 4", "4", 0),             # correct proposal: +1
           msg("review", "RIGHT, 2+2=4", None, 1),           # verdict right on a correct answer: +1
           msg("propose", "hmm 5", "5", 2),                   # wrong: −1
           msg("review", "right", None, 3),                   # says right on a wrong answer: −1
           msg("review", "not sure", None, 4),                # unparseable: 0
           msg("propose", "no idea", None, 5),                # invalid: −1
           msg("review", "WRONG", None, 6))                   # no parsable pending answer: 0
    assert tracer_role_rewards(batch(e))[0] == pytest.approx([1, 1, -1, -1, 0, -1, 0], abs=0)
    first_review = ep(msg("review", "RIGHT", None, 0))
    assert tracer_role_rewards(batch(first_review))[0] == pytest.approx([0], abs=0)


def test_skipped_keep_leaves_pending_and_gets_zero():
    e = ep(msg("propose", "it is 4", "4", 0), msg("review", "", None, 1, spoke=False),
           msg("propose", "", None, 2, spoke=False),  # keep: the pending answer stays "4"
           msg("review", "Correct.", None, 3))
    assert tracer_role_rewards(batch(e))[0] == pytest.approx([1, 0, 0, 1], abs=0)


def test_turn_group_normalisation():
    good = ep(msg("propose", "4", "4", 0), msg("review", "RIGHT", None, 1))
    bad = ep(msg("propose", "5", "5", 0), msg("review", "RIGHT", None, 1))
    out = tracer_roles_credit(batch(good, bad), TracerRolesOptions())
    # proposals [+1, −1]: mean 0, pop. std 1 -> [1, −1]; reviews [+1, −1] (right on good, wrong on bad)
    assert out[0] == pytest.approx([1, 1], abs=1e-12)
    assert out[1] == pytest.approx([-1, -1], abs=1e-12)
    both_good = tracer_roles_credit(batch(good, good), TracerRolesOptions())
    assert all(np.all(a == 0) for a in both_good)  # std 0 < 0.05: TRACER skips the update
    raw = assign("tracer_roles", batch(good, bad), {"normalise": "raw"})
    assert raw[1] == pytest.approx([-1, -1], abs=0)
    three = tracer_roles_credit(batch(good, bad, bad), TracerRolesOptions())
    # proposals [1, −1, −1]: mean −1/3, pop. std sqrt(8/9) = 0.942809 -> [1.414214, −0.707107, −0.707107]
    assert [a[0] for a in three] == pytest.approx([1.414214, -0.707107, -0.707107], abs=1e-6)


def test_errors():
    with pytest.raises(ValueError, match="batch.score"):
        tracer_roles_credit(CreditBatch(episodes=(ep(msg("propose", "4", "4", 0)),)), TracerRolesOptions())
    solve = Message(agent="proposer_0", role="proposer", round=0, stage="solve", text="4", answer="4")
    with pytest.raises(ValueError, match="stage 'solve'"):
        tracer_roles_credit(batch(ep(solve)), TracerRolesOptions())

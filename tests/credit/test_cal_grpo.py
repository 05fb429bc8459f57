"""CAL-GRPO: attempt-level credit for Verification@K, hand-worked and invariants."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from teamplay.credit.registry import CreditBatch, assign, check_credit
from teamplay.errors import ConfigError
from teamplay.records import Episode, Message, TaskItem

ITEM = TaskItem("p/0", "2+2?", "4")


def score(text, item):
    return 1.0 if text == item.reference else 0.0


def pr_episode(attempts, reward=None):
    """proposer attempts (answers) with a review after each; reward = last attempt right."""
    msgs = []
    for k, a in enumerate(attempts):
        msgs.append(Message("proposer_0", "proposer", k, "propose", f"answer {a}", completion_ids=(1,), answer=a))
        msgs.append(Message("reviewer_0", "reviewer", k, "review", "WRONG", completion_ids=(1,)))
    r = reward if reward is not None else float(attempts[-1] == "4")
    return Episode("p/0", "g", ("proposer_0", "reviewer_0"), tuple(msgs), attempts[-1], r)


def test_cal_grpo_hand_worked():
    # V = [1, 0, 1] (ep0 right at attempt 2, ep1 never, ep2 right at once).
    # k=1: all live, V = [1, 0, 1]: mean 2/3, std sqrt(2/9) = 0.471405 -> [0.707107, -1.414214, 0.707107]
    # k=2: live {ep0, ep1} (ep2 made no 2nd attempt): V = [1, 0] -> [1, -1]
    # reviews: GRPO of the team rewards [1, 0, 1] = the same [0.707107, -1.414214, 0.707107]
    eps = [pr_episode(["3", "4"]), pr_episode(["5", "6"]), pr_episode(["4"])]
    out = assign("cal_grpo", CreditBatch(tuple(eps), ITEM, score))
    np.testing.assert_allclose(out[0], [0.707107, 0.707107, 1.0, 0.707107], atol=1e-6)
    np.testing.assert_allclose(out[1], [-1.414214, -1.414214, -1.0, -1.414214], atol=1e-6)
    np.testing.assert_allclose(out[2], [0.707107, 0.707107], atol=1e-6)


def test_attempts_after_a_right_one_get_zero():
    # ep0 right at once, then re-proposes a wrong answer: that attempt cannot change V -> 0
    eps = [pr_episode(["4", "5"], reward=0.0), pr_episode(["3", "3"])]
    out = assign("cal_grpo", CreditBatch(tuple(eps), ITEM, score))
    assert out[0][2] == 0.0  # exact: V stays 1 after a right attempt: 1 - 1 = 0
    assert out[0][0] > 0 > out[1][0]  # V = [1, 0] at attempt 1


def test_declares_the_trait_it_needs_and_refuses_protocols_without_it():
    assert check_credit("cal_grpo", {}, "debate", None) is not None
    with pytest.raises(ConfigError, match=r"needs a protocol where an agent answers again .*\(trait 'revises'\); "
                                          r"protocol 'single' does not declare it \(protocols that do: debate, "
                                          r"proposer_reviewer\)"):
        check_credit("cal_grpo", {}, "single", None)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.sampled_from(["3", "4", "5"]), min_size=1, max_size=4), min_size=1, max_size=6))
def test_zero_sum_per_attempt_index(groups):
    eps = [pr_episode(a) for a in groups]
    out = assign("cal_grpo", CreditBatch(tuple(eps), ITEM, score))
    sums: dict[int, float] = defaultdict(float)
    for ep, adv in zip(eps, out, strict=True):
        assert np.isfinite(adv).all()
        k = 0
        for m, a in zip(ep.messages, adv, strict=True):
            if m.role == "proposer":
                sums[k] += a
                k += 1
    assert all(abs(s) < 1e-9 for s in sums.values())

"""``raft``: reward-ranked fine-tuning (Dong et al. 2023, RAFT): train on the right team answers only.
Every spoken message of an episode with ``R_g >= threshold`` gets 1, every other message 0: the
policy-gradient loss on advantage 1 is the likelihood of the selected episodes (supervised
fine-tuning on them), with no push-down of wrong ones and no group baseline. A control for
"reinforcing right answers" without any credit between agents. ``select: best`` is RAFT's own
rule, reward-ranked: per group the episodes with the group's highest reward (ties all kept), when
that reward is above 0; it is the form that trains a team whose reward is a fraction (``split``
with K solvers), where a wholly right team answer may never occur and the threshold selects none.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from teamplay.credit.methods.assumptions import BROADCAST
from teamplay.credit.registry import CardText, CreditBatch, MethodOptions, register_credit


class RAFTOptions(MethodOptions):
    """Options of ``raft``."""

    select: Literal["threshold", "best"] = Field(
        "threshold", description="'threshold': an episode is selected when its team reward is at least "
                                 "`threshold`; 'best': per group, the episodes with the group's highest reward "
                                 "(ties all selected) when it is above 0 (RAFT's reward ranking).")
    threshold: float = Field(1.0, description="An episode is selected (advantage 1 on its messages) when its "
                                              "team reward is at least this; 1.0: a right answer. Used by "
                                              "select: threshold only.")


RAFT_CARD = CardText(
    "RAFT (reward-ranked fine-tuning): 1 on every spoken message of an episode whose team reward is at "
    "least the threshold (a right team answer), 0 elsewhere: supervised fine-tuning on the right "
    "episodes, no baseline, no push-down.",
    (BROADCAST,
     "a selected episode is worth imitating in every message, and an unselected one carries no "
     "information (wrong answers are never pushed down)"),
    ("tests/credit/test_broadcast_controls.py::test_raft_worked_numbers",
     "tests/credit/test_broadcast_controls.py::test_raft_selects_right_episodes_only"),
    "arithmetic on the G rewards")


@register_credit("raft", RAFTOptions, "RAFT: advantage 1 on the messages of right team answers, 0 elsewhere",
                 card=RAFT_CARD)
def raft_credit(batch: CreditBatch, options: RAFTOptions) -> list[np.ndarray]:
    """``A = [R_g >= threshold]`` (``select: best``: ``[R_g = max_h R_h > 0]``) on every spoken message
    of episode g; skipped turns get 0.

    Invariants: every advantage is 0 or 1. With the threshold an episode's advantages depend on its
    own reward alone (no group baseline: a group with every answer right trains on all of it, one
    with none on nothing); with ``best`` at least one episode of a group with a positive reward is
    selected, and none of a group whose rewards are all 0.
    """
    rewards = [ep.reward for ep in batch.episodes]
    best = max(rewards, default=0.0)
    if options.select == "best":
        chosen = [best > 0 and r == best for r in rewards]  # exact: ties of one group's reward
    else:
        chosen = [r >= options.threshold for r in rewards]
    return [np.array([float(pick) if m.spoke else 0.0 for m in ep.messages])
            for ep, pick in zip(batch.episodes, chosen, strict=True)]


__all__ = ["RAFTOptions", "raft_credit"]

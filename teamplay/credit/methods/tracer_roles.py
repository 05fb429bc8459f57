"""``tracer_roles``: TRACER's role rewards as per-message advantages (docs/credit/specification.md#tracer).

A proposal gets ``+1`` if its answer is correct and ``−1`` otherwise; a review ``+1`` / ``−1`` when its
verdict matches / contradicts the correctness of the pending answer (0 without one), by
:func:`reviewer_reward`, the value TRACER's controllers are trained on too
(``teamplay.training.play.controllers``, which import the role rewards from here). Works with the
proposer_reviewer protocol.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from teamplay.credit.registry import CardText, CreditBatch, MethodOptions, register_credit


def signed(correct: bool) -> float:
    """+1 for a correct answer, −1 for a wrong or invalid one (TRACER's role reward of a proposal, §2.4)."""
    return 1.0 if correct else -1.0


def parse_verdict(text: str) -> bool | None:
    """A review's verdict as the proposer_reviewer protocol reads it (one parser for env and
    credit, so they can never disagree): True for RIGHT/CORRECT, False for WRONG/INCORRECT on the
    first non-empty line (case-insensitive, markdown ignored), None otherwise.

    >>> parse_verdict("\\n  Right, 12 is the sum")
    True
    >>> parse_verdict("**INCORRECT**: the carry is lost")
    False
    >>> parse_verdict("I think it is right") is None
    True
    """
    from teamplay.envs.protocols.verdicts import parse_verdict as protocol_verdict

    verdict = protocol_verdict(text)
    return None if verdict is None else verdict == "RIGHT"


def reviewer_reward(text: str, pending_correct: bool | None) -> float:
    """Reviewer reward: +1 if the verdict matches whether the pending answer is correct, −1 if it
    does not, 0 if the verdict is unparseable or there is no pending answer (``None``)."""
    verdict = parse_verdict(text)
    if verdict is None or pending_correct is None:
        return 0.0
    return 1.0 if verdict == pending_correct else -1.0


class TracerRolesOptions(MethodOptions):
    """Options of the registered ``tracer_roles`` method."""

    correct_threshold: float = Field(
        0.5, ge=0, le=1, description="A verifier score >= this counts as correct (scores lie in [0, 1]).")
    normalise: Literal["turn_group", "raw"] = Field(
        "turn_group", description="'turn_group': GSPO-style group normalisation of the role rewards of the "
                                  "messages with the same (round, stage) across the group (population std); "
                                  "'raw': the ±1/0 rewards themselves.")
    min_reward_std: float = Field(
        0.05, ge=0, description="With 'turn_group', a (round, stage) group whose reward std is below this "
                                "gets zeros (TRACER skips the GSPO update then).")
    eps: float = Field(1e-8, gt=0, description="Floor of the std in the normalisation.")


def tracer_role_rewards(batch: CreditBatch, correct_threshold: float = 0.5) -> list[np.ndarray]:
    """TRACER's role rewards per message [T_g] (before any normalisation).

    * ``stage == "propose"``: ``+1`` if the proposal's answer is correct, ``−1`` if wrong or
      invalid (``answer is None``); correct means ``batch.score(text, batch.item) >= threshold``.
    * ``stage == "review"``: :func:`reviewer_reward` of the review text against the correctness of
      the pending answer, taken to be the ``answer`` of the most recent earlier ``"propose"`` message
      of the same episode (assumption about the proposer_reviewer protocol: reviews never change
      the pending answer, so the latest proposal is what was under review). No earlier proposal,
      or a proposal without a parsable answer, gives 0 (TRACER: no pending answer).
    * skipped messages (``spoke=False``) get 0. Any other stage is a ValueError.
    """
    if batch.score is None or batch.item is None:
        raise ValueError("credit method 'tracer_roles' needs batch.score and batch.item to judge answers")
    out = []
    for g, ep in enumerate(batch.episodes):
        rewards = np.zeros(len(ep.messages))
        pending_correct: bool | None = None
        for t, msg in enumerate(ep.messages):
            if msg.stage not in ("propose", "review"):
                raise ValueError(f"tracer_roles: episode {g} message {t} has stage {msg.stage!r}; only "
                                 f"'propose' and 'review' (the proposer_reviewer protocol) are supported")
            if msg.stage == "propose":
                if msg.spoke:  # a skipped proposal (keep) leaves the pending answer as it was
                    correct = (msg.answer is not None
                               and float(batch.score(msg.text, batch.item)) >= correct_threshold)
                    rewards[t] = signed(correct)
                    pending_correct = correct if msg.answer is not None else None
            elif msg.spoke:
                rewards[t] = reviewer_reward(msg.text, pending_correct)
        out.append(rewards)
    return out


TRACER_ROLES_CARD = CardText(
    "TRACER's role rewards, not a causal contrast: a proposal gets +1 if its answer is correct "
    "and -1 otherwise; a review +1 / -1 when its verdict matches / contradicts the correctness of "
    "the pending answer, 0 without one; by default normalised over the messages that share "
    "(round, stage) across the group (a group with std below min_reward_std gets 0).",
    ("a message is worth its local correctness, whatever it did to the team's final reward (a "
     "right verdict the proposer ignores still earns +1)",
     "the latest proposal is the answer under review",
     "messages with the same (round, stage) are comparable candidates for one context although "
     "their histories differ"),
    ("tests/credit/test_regret_roles.py::test_raw_role_rewards",
     "tests/credit/test_regret_roles.py::test_turn_group_normalisation"),
    "one verifier call per proposal")


@register_credit("tracer_roles", TracerRolesOptions,
                 "TRACER role rewards: proposer ±1 on its answer, reviewer +1/0/−1 on its verdict "
                 "(proposer_reviewer protocol; for GSPO)", traits=("verdicts",),
                 card=TRACER_ROLES_CARD)
def tracer_roles_credit(batch: CreditBatch, options: TracerRolesOptions) -> list[np.ndarray]:
    """Role-specific rewards of TRACER (§2.4) as per-message advantages for a GSPO update.

    With ``normalise="turn_group"`` the messages that share (round, stage) across the G episodes
    play the part of TRACER's candidates for one context: their rewards are centred and divided by
    ``max(std, eps)`` (population std), and a group whose std is below ``min_reward_std`` (e.g. all
    proposals correct) gets zeros. Skipped messages are left out of the groups and get 0.
    Invariant: each normalised group sums to 0.
    """
    rewards = tracer_role_rewards(batch, options.correct_threshold)
    if options.normalise == "raw":
        return rewards
    groups: dict[tuple[int, str], list[tuple[int, int]]] = {}
    for g, ep in enumerate(batch.episodes):
        for t, msg in enumerate(ep.messages):
            if msg.spoke:
                groups.setdefault((msg.round, msg.stage), []).append((g, t))
    out = [np.zeros_like(r) for r in rewards]
    for members in groups.values():
        vals = np.array([rewards[g][t] for g, t in members])
        std = vals.std()
        if std < options.min_reward_std:
            continue
        for (g, t), v in zip(members, (vals - vals.mean()) / max(std, options.eps), strict=True):
            out[g][t] = v
    return out


__all__ = ["TracerRolesOptions", "tracer_role_rewards", "tracer_roles_credit"]

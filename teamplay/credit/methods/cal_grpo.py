"""CAL-GRPO (arXiv 2604.17912): calibrated attempt-level credit for agents that make successive
attempts after verifier or reviewer feedback (proposer_reviewer re-proposals, debate rounds),
aimed at Verification@K: an agent succeeds when one of its first K attempts is right.

For agent i of episode g, its attempts are its spoken messages that state an answer (in order,
k = 1..K_{g,i}); each is checked with the task's verifier, ``c_{g,i,k} = score(answer) >= 0.5``.

    V_{g,i}   = 1 if some attempt of agent i is right, else 0          (Verification@K outcome)
    live(k)   = episodes where agent i made attempt k and no earlier attempt was right
    A_{g,i,k} = (V_{g,i} - mean_{live(k)} V) / max(std_{live(k)} V, eps)   for g in live(k)
    A_{g,i,k} = 0                                                      attempts after a right one

Why this weighting: rewarding each attempt by its own pass/fail is the naive scheme the paper
shows to be biased for Verification@K. Here every attempt that could still change the outcome
is credited with the outcome V itself, against a baseline of the episodes that reached the same
attempt still unsolved (a baseline that does not depend on the attempt, as the policy gradient
needs, and that is calibrated to how hard it is to still succeed from attempt k); attempts made
after a right one cannot change V and get 0. Messages that are not attempts (reviews, messages
without an answer, roles outside ``attempt_roles``) get the GRPO advantage of the team reward.

The paper's exact weights are not in its abstract; this construction and its options (``ddof``,
``mode``, ``eps``, ``attempt_roles``) are this module's choices.

Invariants: for every agent and attempt index, the advantages of the live episodes sum to 0
(zero-sum per attempt); attempts after a success are 0; a group where every agent's outcome is
the same gives 0 to every attempt.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Literal

import numpy as np
from pydantic import Field

from teamplay.credit.registry import CardText, CreditBatch, MethodOptions, register_credit
from teamplay.credit.values.group import group_advantage


class CALGRPOOptions(MethodOptions):
    """Options of the ``cal_grpo`` method."""

    attempt_roles: tuple[str, ...] = Field(("proposer", "debater"), description="Roles whose answer-bearing "
                                                                                "messages are attempts.")
    ddof: Literal[0, 1] = Field(0, description="Std of the live episodes: 0 population, 1 unbiased.")
    mode: Literal["std", "mean_only"] = Field("std", description="'std' divides by the std; 'mean_only' does not.")
    eps: float = Field(1e-8, gt=0, description="Floor of the std.")


CAL_GRPO_CARD = CardText(
    "CAL-GRPO: for agent i's k-th answer-bearing attempt, its Verification@K outcome V (some "
    "attempt right) against the episodes that reached attempt k still unsolved: (V - mean) / "
    "std over that live set; attempts after a right one get 0; other messages the team's GRPO "
    "value.",
    ("the target is the agent's own Verification@K outcome, not the team reward",
     "the episodes live at attempt k are a baseline for it (same problem, same attempt index, "
     "still unsolved)",
     "the paper's exact weights are not public: this construction is the module's choice"),
    ("tests/credit/test_cal_grpo.py::test_cal_grpo_hand_worked",
     "tests/credit/test_cal_grpo.py::test_zero_sum_per_attempt_index"),
    "no generation")


@register_credit("cal_grpo", CALGRPOOptions, "CAL-GRPO: attempt-level credit for Verification@K "
                 "(re-proposals, debate rounds)", traits=("revises",),
                 cost="re-scores each attempt's answer with the verifier", card=CAL_GRPO_CARD)
def cal_grpo_credit(batch: CreditBatch, options: CALGRPOOptions) -> list[np.ndarray]:
    if batch.score is None or batch.item is None:
        raise ValueError("cal_grpo re-scores attempts: the CreditBatch needs score and item")
    score, item = batch.score, batch.item
    team = group_advantage([ep.reward for ep in batch.episodes], options.ddof, options.mode, options.eps)
    out = []
    # attempts[(agent, k)] -> [(g, t, V)] of live episodes
    live: dict[tuple[str, int], list[tuple[int, int, float]]] = defaultdict(list)
    for g, ep in enumerate(batch.episodes):
        adv = np.array([team[g] if m.spoke else 0.0 for m in ep.messages])
        by_agent: dict[str, list[int]] = defaultdict(list)
        for t, m in enumerate(ep.messages):
            if m.spoke and m.role in options.attempt_roles and m.answer is not None:
                by_agent[m.agent].append(t)
        for agent, ts in by_agent.items():
            right = [float(score(ep.messages[t].answer, item)) >= 0.5 for t in ts]
            outcome = 1.0 if any(right) else 0.0
            for k, t in enumerate(ts):
                if k > 0 and any(right[:k]):
                    adv[t] = 0.0  # after a right attempt: cannot change the outcome
                else:
                    live[(agent, k)].append((g, t, outcome))
        out.append(adv)
    for entries in live.values():
        values = group_advantage([v for _, _, v in entries], options.ddof, options.mode, options.eps)
        for (g, t, _), a in zip(entries, values, strict=True):
            out[g][t] = float(a)
    return out

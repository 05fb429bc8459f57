"""``shapley_prm``: ``shapley``'s agent credit refined per message by a local score.

``message_score: masking`` needs the ``transcript_scorer`` resource (besides what ``shapley``'s
``value`` needs); ``verifier`` re-scores the messages' answers with the task's verifier.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from teamplay.credit.methods.group_baseline import same_team
from teamplay.credit.methods.shapley import ShapleyOptions, agent_shapley, score_answer, value_needs
from teamplay.credit.registry import CardText, CreditBatch, register_credit
from teamplay.credit.values.group import group_credit_advantage
from teamplay.credit.values.prm import leave_one_message_out_scores, refine_to_messages, verifier_message_scores


class ShapleyPRMOptions(ShapleyOptions):
    """Options of the ``shapley_prm`` method."""

    message_score: Literal["verifier", "masking"] = Field(
        "verifier", description="Local message score q_t: 'verifier' (2*score(answer)-1, 0 without "
                                "answer) or 'masking' (leave-one-message-out with "
                                "the transcript_scorer resource).")
    refine_mode: Literal["signed", "proportional"] = Field("signed", description="See refine_to_messages.")
    beta0: float = Field(1.0, ge=0, description="Largest spread coefficient of the refinement.")
    bound: float | None = Field(
        None, gt=0, description="Bound B on |message advantage|; None = 1 + the largest |agent "
                                "advantage| of the group, i.e. refinement moves a message by <= 1.")
    temperature: float = Field(1.0, gt=0, description="Softmax temperature of refine_mode='proportional'.")


def _prm_needs(options: ShapleyPRMOptions) -> frozenset[str]:
    return value_needs(options) | ({"transcript_scorer"} if options.message_score == "masking" else set())


SHAPLEY_PRM_CARD = CardText(
    "shapley's agent advantage A_{g,i}, spread over agent i's messages by a local score q_t: a_t = "
    "A_{g,i} + beta_i (q_t - mean q), conserving n_i A_{g,i} per agent and bounded by B; q is "
    "the verifier on the message's answer (2 score - 1, 0 without one) or leave-one-message-out "
    "masking.",
    ("those of shapley for each agent's total",
     "within an agent, q_t ranks its messages' contributions: a message with a right answer (or "
     "whose removal lowers the masked score) did more; the masking score sees no influence "
     "through later turns",
     "beta0 and the bound are chosen constants ([INFERRED]), not identified"),
    ("tests/credit/test_methods.py::test_shapley_prm_conservation_and_agreement",
     "tests/credit/test_methods.py::test_shapley_prm_locality"),
    "message_score=verifier re-scores answers only; masking costs one scorer call per message")


@register_credit("shapley_prm", ShapleyPRMOptions, "Shapley agent credit refined per message by a scorer",
                 requires=_prm_needs, cost="shapley's, plus one score per message", card=SHAPLEY_PRM_CARD)
def shapley_prm_credit(batch: CreditBatch, options: ShapleyPRMOptions) -> list[np.ndarray]:
    """``shapley`` agent advantages, spread over the agent's messages by local scores
    (docs/credit/specification.md#prm-success).

    Agent i of episode g has advantage ``A_{g,i}`` (as in ``shapley``) and spoken messages ``M_i``
    (``n_i`` of them). ``refine_to_messages`` with ``phi = n_i A_{g,i}``, the local message scores
    ``q`` (``options.message_score``) and bound ``B`` gives message advantages
    ``a_t = A_{g,i} + beta_i (q_t - qbar_i)``.

    Invariants: conservation ``sum_{t in M_i} a_t = n_i A_{g,i}`` (the total ``shapley`` gives
    those messages; with equal q the two methods agree exactly); ``|a_t| <= B``; locality: the
    scores of other agents' messages never change this agent's message advantages. An agent with
    no spoken message and non-zero advantage raises ValueError (its credit would be lost).
    """
    agents = same_team(batch)
    adv = group_credit_advantage(agent_shapley(batch, options), options.ddof, options.mode, options.eps)
    bound = options.bound if options.bound is not None else 1.0 + float(np.abs(adv).max())
    question = batch.item.prompt if batch.item is not None else ""
    out = []
    for ep, a in zip(batch.episodes, adv, strict=True):
        spoken = [t for t, m in enumerate(ep.messages) if m.spoke]
        msgs = [ep.messages[t] for t in spoken]
        if options.message_score == "verifier":
            q = verifier_message_scores(msgs, score_answer(batch))
        else:
            scorer = batch.resources.need("transcript_scorer", "option message_score=masking")
            q = leave_one_message_out_scores(ep.messages, scorer, question)[spoken]
        index = {x: j for j, x in enumerate(agents)}
        authors = [index[m.agent] for m in msgs]
        counts = np.bincount(authors, minlength=len(agents)) if authors else np.zeros(len(agents), int)
        r = refine_to_messages(counts * a, authors, q, B=bound, beta0=options.beta0,
                               mode=options.refine_mode, temperature=options.temperature)
        full = np.zeros(len(ep.messages))
        full[spoken] = r
        out.append(full)
    return out


__all__ = ["ShapleyPRMOptions", "shapley_prm_credit"]

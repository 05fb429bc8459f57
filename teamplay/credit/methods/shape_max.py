"""``shape_max``: ShapE-GRPO, the Shapley credit of the best-answer (max) game over agents as candidates.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from teamplay.credit.methods.group_baseline import broadcast
from teamplay.credit.registry import CardText, CreditBatch, MethodOptions, register_credit
from teamplay.credit.values.shapley import shape_grpo_advantages


class ShapeMaxOptions(MethodOptions):
    """Options of the ``shape_max`` method (ShapE-GRPO)."""

    base: float = Field(0.0, description="v(empty) of the max game; every agent score must be >= base.")
    ddof: Literal[0, 1] = Field(0, description="Std of the set rewards for non-candidate messages.")
    eps: float = Field(1e-8, gt=0, description="Added to the stds (spec: std + eps).")
    length_normalise: bool = Field(
        False, description="Scale a candidate's message advantages by mean length / its token count.")


SHAPE_MAX_CARD = CardText(
    "ShapE-GRPO: the Shapley value of each answering agent in the max game v(S) = max_{i in S} "
    "u_i (u_i its scored answer, v(empty) = base); candidate messages get (K phi - mean R) / "
    "(pooled std(K phi) + eps) with R = max u, others (an aggregator) the set-level GRPO value.",
    ("the team is worth its best answer (a reader picks the best candidate): agents are "
     "candidates that each give an answer, and how one agent's text changed another's answer is "
     "not modelled",
     "the no-extra-bias argument assumes candidates of equal length (option length_normalise)"),
    ("tests/credit/test_methods.py::test_shape_max_spec_example_with_aggregator",),
    "closed form in O(K log K), no generation")


@register_credit("shape_max", ShapeMaxOptions, "ShapE-GRPO: Shapley credit of the best-answer (max) game",
                 traits=("every_agent_answers",), card=SHAPE_MAX_CARD)
def shape_max_credit(batch: CreditBatch, options: ShapeMaxOptions) -> list[np.ndarray]:
    """ShapE-GRPO over agents as candidates (docs/credit/specification.md#shapley-max).

    Candidates of episode g are the agents listed in ``agent_correct`` (utility = that score); the
    set utility is the best candidate's, ``R_g = max_i u_{g,i}``. Messages of candidate i get
    ``(K_g phi_{g,i} - mean R) / (std_pool(K phi) + eps)`` (per-token factor ``Lbar / L_i`` with
    ``length_normalise``, ``L_i`` = the agent's completion tokens); messages of other agents (e.g. an
    aggregator) get the set-level ``(R_g - mean R) / (std R + eps)``.

    Invariants: per episode ``sum_i phi_{g,i} = R_g - base`` (efficiency); with ``base = 0`` and no
    length normalisation the candidate advantages sum to 0 over the group, and so do the set-level ones.
    """
    utilities, lengths, cands = [], [], []
    for g, ep in enumerate(batch.episodes):
        names = [a for a in ep.agents if a in ep.agent_correct]
        if not names:
            raise ValueError(f"shape_max: episode {g} has no agent_correct entries; candidates are the "
                             "agents whose answers were scored")
        cands.append(names)
        utilities.append([float(ep.agent_correct[a]) for a in names])
        lengths.append([sum(m.n_tokens for m in ep.messages if m.agent == a and m.spoke) for a in names])
    res = shape_grpo_advantages(utilities, base=options.base, eps=options.eps, ddof=options.ddof,
                                length_normalise=options.length_normalise,
                                lengths=lengths if options.length_normalise else None)
    out = []
    for ep, names, cand, expl in zip(batch.episodes, cands, res.candidate, res.explanation, strict=True):
        per_agent = dict.fromkeys(ep.agents, float(expl))
        per_agent.update(zip(names, cand.tolist(), strict=True))
        out.append(broadcast(ep, per_agent))
    return out


__all__ = ["ShapeMaxOptions", "shape_max_credit"]

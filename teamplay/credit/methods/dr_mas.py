"""``dr_mas``: Dr. MAS's agent-wise normalisation (Feng et al. 2026, "Dr. MAS: Stable Reinforcement
Learning for Multi-Agent LLM Systems"): GRPO's group advantage with each agent's own statistics.
Agent i's samples are its spoken messages across the group, each carrying its episode's team
reward ``R_g``; a message of agent i in episode g gets ``(R_g - mean_i) / std_i`` over those samples
(``group_advantage``, the function ``grpo`` uses, on agent i's samples alone). When every agent
speaks exactly once in every episode each agent's samples are the G rewards, and ``dr_mas`` equals
``grpo``; it differs where agents speak unequally often (skipped turns, several turns per episode,
agents absent from some episodes), which is where a shared baseline sits off an agent's own.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from teamplay.credit.methods.assumptions import BROADCAST, GROUP_BASELINE
from teamplay.credit.methods.group_baseline import GroupOptions
from teamplay.credit.registry import CardText, CreditBatch, register_credit
from teamplay.credit.values.group import group_advantage


class DrMASOptions(GroupOptions):
    """Options of ``dr_mas``: the group baseline's, per agent."""

    eps_rule: Literal["floor", "add"] = Field(
        "floor", description="'floor': divide by max(std, eps); 'add': by std + eps (as in grpo).")


DR_MAS_CARD = CardText(
    "Dr. MAS's agent-wise normalisation: per agent, (R_g - mean_i) / std_i over the agent's own samples "
    "(its spoken messages across the group, each with its episode's team reward); equals grpo when every "
    "agent speaks once in every episode.",
    (GROUP_BASELINE, BROADCAST,
     "an agent's own reward statistics are the right scale for its gradient (the method's premise: "
     "agents that act unequally often, or in different episodes, see different reward distributions)"),
    ("tests/credit/test_broadcast_controls.py::test_dr_mas_equals_grpo_when_every_agent_speaks_once",
     "tests/credit/test_broadcast_controls.py::test_dr_mas_worked_numbers_with_a_skipped_turn"),
    "arithmetic on the G rewards, per agent")


@register_credit("dr_mas", DrMASOptions, "Dr. MAS: the team reward normalised per agent over its own samples",
                 card=DR_MAS_CARD)
def dr_mas_credit(batch: CreditBatch, options: DrMASOptions) -> list[np.ndarray]:
    """Per agent, ``group_advantage`` of the team rewards of its spoken messages (module docstring).

    Invariants: per agent the advantages of its messages sum to 0 over the group; an agent that
    speaks exactly once in every episode gets ``grpo``'s advantages; skipped turns get 0. Edge
    cases: an agent with one spoken message, or equal rewards on all of them, gets 0.
    """
    out = [np.zeros(len(ep.messages)) for ep in batch.episodes]
    agents = dict.fromkeys(m.agent for ep in batch.episodes for m in ep.messages if m.spoke)
    for agent in agents:
        where = [(g, t) for g, ep in enumerate(batch.episodes) for t, m in enumerate(ep.messages)
                 if m.agent == agent and m.spoke]  # agent's samples, in group order
        rewards = [batch.episodes[g].reward for g, _ in where]
        adv = group_advantage(rewards, options.ddof, options.mode, options.eps, options.eps_rule)
        for (g, t), a in zip(where, adv, strict=True):
            out[g][t] = a
    return out


__all__ = ["DrMASOptions", "dr_mas_credit"]

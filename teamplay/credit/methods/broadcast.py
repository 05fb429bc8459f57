"""Broadcast baselines beside ``grpo``: the team reward on every message, with another baseline or filter.

Importing this module registers:

* ``dr_mas``: Dr. MAS's agent-wise normalisation (Feng et al. 2026, "Dr. MAS: Stable Reinforcement
  Learning for Multi-Agent LLM Systems"): GRPO's group advantage with each agent's own statistics.
  Agent i's samples are its spoken messages across the group, each carrying its episode's team
  reward ``R_g``; a message of agent i in episode g gets ``(R_g - mean_i) / std_i`` over those samples
  (``group_advantage``, the function ``grpo`` uses, on agent i's samples alone). When every agent
  speaks exactly once in every episode each agent's samples are the G rewards, and ``dr_mas`` equals
  ``grpo``; it differs where agents speak unequally often (skipped turns, several turns per episode,
  agents absent from some episodes), which is where a shared baseline sits off an agent's own.
* ``raft``: reward-ranked fine-tuning (Dong et al. 2023, RAFT): train on the right team answers only.
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
from pydantic import BaseModel, ConfigDict, Field

from teamplay.credit.methods.assumptions import BROADCAST, GROUP_BASELINE
from teamplay.credit.methods.group_baseline import GroupOptions
from teamplay.credit.registry import CardText, CreditBatch, register_credit
from teamplay.credit.values.group import group_advantage


class DrMASOptions(GroupOptions):
    """Options of ``dr_mas``: the group baseline's, per agent."""

    eps_rule: Literal["floor", "add"] = Field(
        "floor", description="'floor': divide by max(std, eps); 'add': by std + eps (as in grpo).")


class RAFTOptions(BaseModel):
    """Options of ``raft``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    select: Literal["threshold", "best"] = Field(
        "threshold", description="'threshold': an episode is selected when its team reward is at least "
                                 "`threshold`; 'best': per group, the episodes with the group's highest reward "
                                 "(ties all selected) when it is above 0 (RAFT's reward ranking).")
    threshold: float = Field(1.0, description="An episode is selected (advantage 1 on its messages) when its "
                                              "team reward is at least this; 1.0: a right answer. Used by "
                                              "select: threshold only.")


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

"""The pieces the group-baseline methods share: the group baseline's options and the broadcast of
per-agent values to an episode's messages (``grpo``, ``gspo``, ``shapley``, ``shapley_prm``,
``shape_max``, ``coverage``, ``dr_mas``, ``oracle``).

Skipped messages (``spoke=False``) always get 0: they produced no tokens to train.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import numpy as np
from pydantic import Field

from teamplay.credit.registry import CreditBatch, MethodOptions
from teamplay.records import Episode


class GroupOptions(MethodOptions):
    """Options of the group baseline shared by the methods built on it."""

    ddof: Literal[0, 1] = Field(0, description="Std of the group: 0 population (TRACER), 1 unbiased.")
    mode: Literal["std", "mean_only"] = Field(
        "std", description="'std' divides by the group std; 'mean_only' only subtracts the mean.")
    eps: float = Field(1e-8, gt=0, description="Floor of the std.")


def broadcast(ep: Episode, per_agent: Mapping[str, float]) -> np.ndarray:
    """[T]: each spoken message gets its author's value, skipped messages 0."""
    return np.array([per_agent[m.agent] if m.spoke else 0.0 for m in ep.messages], dtype=np.float64)


def same_team(batch: CreditBatch) -> tuple[str, ...]:
    """The agents of the group's episodes, one tuple (a group played by two teams is a ValueError)."""
    agents = batch.episodes[0].agents
    for g, ep in enumerate(batch.episodes):
        if ep.agents != agents:
            raise ValueError(f"credit: episode {g} has agents {ep.agents}, episode 0 has {agents}; "
                             "a group must be played by one team")
    return agents


__all__ = ["GroupOptions", "broadcast", "same_team"]

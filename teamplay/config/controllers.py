"""The ``controllers`` section: learned speak/skip controllers before skippable turns."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from teamplay.config.base import Section

#: stages whose speak/skip action values are defined (proposer_reviewer's two, debate's revision rounds)
STAGES = ("propose", "review", "debate")
Stage = Literal["propose", "review", "debate"]
Mode = Literal["average_greedy", "current", "sample", "always_speak"]


class ControllerConfig(Section):
    """The ``controllers:`` section of a team config (frozen: the controllers keep it)."""

    model_config = ConfigDict(frozen=True)  # merged with Section's

    enabled: bool = Field(False, description="Learned speak/skip controllers (regret matching) before "
                                             "skippable turns (proposer_reviewer, debate).")
    mode: Mode = Field("average_greedy", description="How evaluation decides: average_greedy, current, "
                                                     "sample, or always_speak (the baseline). Training "
                                                     "always samples the current strategy.")
    price_per_token: float = Field(0.0, ge=0.0, description="Subtracted per generated token from the "
                                                            "value of speaking (cost-aware learning).")
    price_per_call: float = Field(0.0, ge=0.0, description="Subtracted per model call from the value "
                                                           "of speaking.")
    stages: tuple[Stage, ...] = Field(STAGES, min_length=1, description="Stages the controllers decide; "
                                      "skippable turns of other stages always speak.")

"""The sections of what the team plays: the benchmark items (``task``, ``eval_task``) and the
protocol that says who speaks when (``protocol``)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from teamplay.config.base import Section


class TaskConfig(Section):
    """Which benchmark items to use."""

    name: str = Field("arith", description="Task name: arith, gsm8k, math, math500, gpqa.")
    split: str = Field("test", description="Split to load (train or test).")
    source: str | None = Field(
        None, description="Local file to load instead of the hub (jsonl/parquet/csv); for arith, "
                          "the level as 'level=N'.")
    limit: int | None = Field(None, ge=1, description="Keep the first N items.")
    distinct: bool = Field(False, description="Drop repeated problems (same prompt text, or the same "
                                              "problem reworded where the task says so: arith and relay_sum "
                                              "with twins_together key a sum and its commuted twin together), "
                                              "keeping the first; limit then counts distinct problems.")
    seed: int = Field(0, description="Seed for procedural tasks and choice shuffling.")
    options: dict[str, Any] = Field(default_factory=dict,
                                    description="Task constructor options, e.g. {level: 3} for arith.")


class ProtocolConfig(Section):
    """How the team talks."""

    name: str = Field("single", description="Protocol name (teamplay list) or a path to a protocol "
                                            "YAML/Python file.")
    options: dict[str, Any] = Field(default_factory=dict,
                                    description="Protocol options, e.g. {rounds: 4, n_agents: 3}.")
    channel: bool = Field(True, description=(
        "False: the no-channel control arm: every message is withheld from the other agents (each sees "
        "the problem, its role's prompt and its own earlier messages only; the transcript, final answer "
        "and reward are unchanged). Shows whether a result needs the agents to read each other. A teacher "
        "warm start still demonstrates with the channel, so the arm starts from its channel arm's warm start."))
    score_cut_messages: bool = Field(True, description=(
        "A message cut at sampling.max_new_tokens before it ended: true reads and grades the answer its "
        "cut text holds (the last number of '3. 14 +' is 14); false leaves it unscored (no answer, as a "
        "message without one). Default: false in teamplay eval, true in training runs (as before this "
        "field). Every evaluation reports the share of cut messages (extra.cut_messages)."))

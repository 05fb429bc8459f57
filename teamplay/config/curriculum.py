"""The ``curriculum`` section: a difficulty dial that a training run turns up between steps.

A curriculum is an ordered list of stages, easiest first. Each stage is a partial override of the
run's own config, of what sets a cooperation setting's difficulty: ``task.options`` (the operand
bound ``max_operand`` of arith, relay_sum and tuples' wrapped task, arith's ``level``) and
``protocol.options`` (K: ``n_agents``), each merged key by key over the run's options (nested
mappings too), and ``team`` (the whole team: a scripted proposer's error rate and how far off its
wrong answers are, ``scripted:noisy_proposer(p_right=0.8, spread=3)``; roles' counts). What a stage
does not set stays the run's, so ``{}`` is the run's own config.

The run plays stage 0 from its first step. After each step it records the step's ``metric`` (a key
of the step's metrics line); once the last ``window`` steps played at the current stage average at
least ``threshold``, the next step plays the next stage (and the average starts again from that
stage's own steps). Held-out evaluations always play the run's own config: the target difficulty.

Each stage is checked when the config loads (``check_stages``): its task and protocol take its
options, and its team has the run's roles and adapters (the adapters train on across stages; a
stage may change a role's count, prompt or scripted policy).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, field_validator

from teamplay.agents.roles import Team
from teamplay.config.base import Section
from teamplay.config.env import ProtocolConfig, TaskConfig

#: the step metrics a curriculum can follow: present on every step's line, in [0, 1]
METRICS = ("reward_mean", "accuracy")


class StageOptions(Section):
    """A stage's options for the task or the protocol, merged over the run's."""

    options: dict[str, Any] = Field(default_factory=dict, description=(
        "Options merged key by key over the run's (nested mappings too), e.g. {max_operand: 10}."))


class CurriculumStage(Section):
    """One difficulty: a partial override of the run's task, protocol and team."""

    task: StageOptions = Field(default_factory=StageOptions, description=(
        "Task options of this stage, over task.options (e.g. {options: {max_operand: 10}}); the "
        "training items are loaded again when they change."))
    protocol: StageOptions = Field(default_factory=StageOptions, description=(
        "Protocol options of this stage, over protocol.options (e.g. {options: {n_agents: 2}})."))
    team: Team | None = Field(None, description=(
        "The team of this stage (None: the run's team): the run's roles and adapters, with other "
        "counts, prompts or scripted policies (e.g. the noisy proposer's p_right)."))


class CurriculumConfig(Section):
    """A difficulty curriculum (module docstring)."""

    stages: list[CurriculumStage] = Field(description=(
        "The difficulties, easiest first (at least two); the run starts at the first."))
    threshold: float = Field(ge=0.0, le=1.0, description=(
        "Move to the next stage after a step at which the moving average of `metric` reaches this."))
    window: int = Field(2, ge=1, description=(
        "Steps in the moving average: the last `window` steps played at the current stage."))
    metric: Literal["reward_mean", "accuracy"] = Field("reward_mean", description=(
        "The step metric averaged (a key of the step's metrics line): the team reward's mean, or the "
        "share of episodes with reward above 0.5."))

    @field_validator("stages")
    @classmethod
    def _at_least_two(cls, stages: list[CurriculumStage]) -> list[CurriculumStage]:
        if len(stages) < 2:
            raise ValueError(f"curriculum.stages: a curriculum needs at least two stages, got {len(stages)}; for "
                             f"a fixed difficulty set task.options and protocol.options and drop curriculum")
        return stages


def merge_options(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``override``'s keys over it; a mapping over a mapping is merged the same way.

    >>> merge_options({"task": "arith", "options": {"level": 1, "max_operand": 99}}, {"options": {"max_operand": 10}})
    {'task': 'arith', 'options': {'level': 1, 'max_operand': 10}}
    """
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge_options(out[key], value)
        else:
            out[key] = value
    return out


def stage_sections(task: TaskConfig, protocol: ProtocolConfig, team: Team | None,
                   stage: CurriculumStage) -> tuple[TaskConfig, ProtocolConfig, Team | None]:
    """The task, protocol and team sections ``stage`` plays: the run's with the stage over them."""
    return (task.model_copy(update={"options": merge_options(task.options, stage.task.options)}),
            protocol.model_copy(update={"options": merge_options(protocol.options, stage.protocol.options)}),
            stage.team if stage.team is not None else team)


def check_stages(curriculum: CurriculumConfig, task: TaskConfig, protocol: ProtocolConfig, team: Team | None) -> None:
    """Refuse (ValueError, one line naming the stage) a stage whose task or protocol does not take its
    options, or whose team has other roles or adapters than the run's team (the protocol's default
    team when ``team`` is None). Builds each stage's task, protocol and one env; loads no items."""
    try:
        base = _resolved_team(task, protocol, team)
    except ValueError as exc:
        raise ValueError(f"curriculum: the run's own task, protocol and team: {exc}") from None
    for i, stage in enumerate(curriculum.stages):
        where = f"curriculum.stages[{i}]"
        try:
            played = _resolved_team(*stage_sections(task, protocol, team, stage))
        except ValueError as exc:  # ConfigError is a ValueError; the message names the option
            raise ValueError(f"{where}: {exc}") from None
        if _adapters(played) != _adapters(base):
            raise ValueError(f"{where}.team: a stage may change a role's count, prompt or scripted policy, not the "
                             f"roles and adapters the run trains across stages; the run's roles: "
                             f"{_describe(base)}, this stage's: {_describe(played)}")


def _resolved_team(task: TaskConfig, protocol: ProtocolConfig, team: Team | None) -> Team:
    """The team the env plays (the protocol's default when ``team`` is None), after the protocol
    accepted it; building the task and protocol checks their options."""
    from teamplay.envs.protocols import get_protocol
    from teamplay.envs.tasks import get_task
    from teamplay.envs.team_env import TeamEnv

    return TeamEnv(get_task(task.name, **task.options), get_protocol(protocol.name, **protocol.options), team).team


def _adapters(team: Team) -> tuple[tuple[str, str | None, bool, str | None], ...]:
    """What must stay across stages: per role, its name, adapter (None: scripted), trainability and base."""
    return tuple((r.name, None if r.scripted else r.adapter_name, r.trainable, r.model) for r in team.roles)


def _describe(team: Team) -> str:
    return ", ".join(f"{r.name} ({'scripted' if r.scripted else 'adapter ' + r.adapter_name})" for r in team.roles)

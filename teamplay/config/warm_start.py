"""The ``warm_start`` section: supervised fine-tuning of each role's adapter on its own messages,
run before the RL steps of ``teamplay train`` (or alone: ``teamplay sft``).

The messages come from a teacher team (``source: teacher``: the protocol's scripted policies,
``teamplay.envs.teachers``) or from the team's own sampled episodes whose team reward reaches
``threshold`` (``source: rejection``: rejection-sampling fine-tuning, as in STaR and RAFT). The
loss is the negative log-likelihood of a role's completion tokens only: prompts, the problem and
other roles' messages are context, never targets (TRL's ``completion_only_loss``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from teamplay.config.base import Section


class WarmStartConfig(Section):
    """Supervised warm start of the role adapters before RL (``teamplay sft``, ``warm_start:``)."""

    source: Literal["teacher", "rejection"] = Field(
        "teacher", description="teacher: the messages of a team of the protocol's scripted teachers (one "
                               "episode per training problem); rejection: the team's own episodes "
                               "(sampled with `sampling`, one per training problem) whose team reward "
                               "is at least `threshold`.")
    episodes: int = Field(64, ge=1, description="Episodes played to build the fine-tuning set: one per "
                                                "training problem, in the run's data order (before the "
                                                "rejection filter).")
    threshold: float = Field(1.0, description="rejection: keep the episodes whose team reward is >= this. "
                                              "Must stay at its default with source teacher.")
    teachers: dict[str, str] = Field(
        default_factory=dict, description="Role -> scripted policy spec ('truthful', "
                                          "'noisy_proposer(p_right=0.5)'): replaces the protocol's teacher of "
                                          "that role, or gives one to a role that has none. source teacher only.")
    answer_format: Literal["boxed", "plain"] = Field(
        "boxed", description="source teacher: the sentence a teacher states an answer in, as the role's "
                             "target. boxed: 'The answer is \\boxed{18}.'; plain: 'The answer is 18.', two to "
                             "four tokens shorter, for a short reply budget (sampling.max_new_tokens), where a "
                             "boxed answer is cut before its box closes.")
    roles: list[str] | None = Field(None, description="Roles whose adapters are fine-tuned (their own messages "
                                                      "only); None = every model-played role of the team.")
    steps: int = Field(20, ge=1, description="Optimiser steps (TRL's max_steps).")
    lr: float = Field(1e-4, gt=0.0, description="AdamW learning rate, constant (TRL's learning_rate).")
    batch_size: int = Field(8, ge=1, description="Messages per optimiser step, drawn in a seeded order that "
                                                 "is reshuffled after every pass over the set.")
    checkpoint_every: int = Field(10, ge=1, description="Checkpoint every N steps (and at the end), into "
                                                        "RUN/warm_start/checkpoints.")
    cache: str | None = Field(
        None, description="A folder runs share (a sweep's): a finished warm start is kept there under a key "
                          "of everything it depends on (this section, model, team, protocol, task, seed, "
                          "sampling, backend), and a run whose warm start has the same key copies it instead "
                          "of fine-tuning again, so the credit methods of one seed fine-tune once. The "
                          "adapters are the ones the run would have trained (same seed, same operations).")
    evaluate: bool = Field(True, description="Evaluate the team on `eval_task` (greedy, `eval_sampling`) "
                                             "before and after the warm start, into RUN/warm_start/metrics.jsonl "
                                             "(skipped without an eval_task).")

    @field_validator("teachers")
    @classmethod
    def _teachers_parse(cls, value: dict[str, str]) -> dict[str, str]:
        from teamplay.agents.backends.scripted import canonical_policy, parse_policy  # the policy registry
        from teamplay.errors import ConfigError

        value = {role: canonical_policy(spec) for role, spec in value.items()}  # old names: one warning each
        for role, spec in value.items():
            try:
                parse_policy(spec)
            except ConfigError as exc:
                raise ValueError(f"warm_start.teachers.{role}: {exc}") from None
        return value

    @model_validator(mode="after")
    def _source_fields(self) -> WarmStartConfig:
        """A field the chosen source ignores is refused, never silently dropped."""
        if self.source == "teacher" and self.threshold != type(self).model_fields["threshold"].default:
            raise ValueError("warm_start.threshold: filters the team's own episodes (source: rejection); "
                             "a teacher's episodes are all kept; remove it or set source: rejection")
        if self.source == "rejection" and self.teachers:
            raise ValueError("warm_start.teachers: only a teacher team (source: teacher) plays scripted "
                             "teachers; remove them or set source: teacher")
        if self.source == "rejection" and self.answer_format != "boxed":
            raise ValueError("warm_start.answer_format: rewrites a teacher's answers (source: teacher); the "
                             "team's own episodes are kept as written; remove it or set source: teacher")
        return self


def check_teachers(ws: WarmStartConfig, protocol: Any, team: Any) -> None:
    """Refuse, before the model loads, a teacher team with a model-played role that has no teacher
    (``teamplay.envs.teachers``): ValueError naming the role. ``protocol`` is the run's
    ``ProtocolConfig``, ``team`` its ``Team`` (None: the protocol's default team). A protocol that
    cannot be built here (a user's file with an error) is left to the run's own checks, which
    ``teamplay.training.run.warm_start`` repeats this one after."""
    if ws.source != "teacher":
        return
    if team is None:
        from teamplay.envs.protocols import get_protocol

        try:
            team = get_protocol(protocol.name, **protocol.options).default_team()
        except Exception:  # noqa: BLE001 - any error here is reported by the run's protocol check
            return
    untaught = untaught_roles(ws, protocol.name, [r.name for r in team.roles if not r.scripted])
    if untaught:
        raise ValueError(untaught)


def untaught_roles(ws: WarmStartConfig, protocol: str, played: list[str]) -> str | None:
    """The refusal of a teacher team in which a role of ``played`` (the model-played roles) has no
    teacher, or None when every one has. Every role of the team plays in it, warm-started or not."""
    from teamplay.envs.teachers import roles_without_teacher

    missing = roles_without_teacher(protocol, played, ws.teachers)
    if not missing:
        return None
    role = missing[0]
    return (f"warm_start: role {role!r} of protocol {protocol!r} has no teacher to play it in the teacher team; "
            f"name one (warm_start.teachers: {{{role}: truthful}}) or use source: rejection")

"""Protocols written in YAML: roles with prompts, a turn schedule, visibility, a final-answer rule.

Example (``configs/protocols/solver_checker.yaml``)::

    name: solver_checker
    roles:
      solver: {prompt: "You solve math problems step by step.", count: 1}
      checker: {prompt: "You check solutions for mistakes.", count: 1}
    schedule:                       # one entry = one round; every agent of the role acts in it
      - {role: solver, stage: solve, instruction: "Solve the problem."}
      - {role: checker, stage: check, instruction: "Check the solution above.", sees: all}
      - {role: solver, stage: revise, instruction: "Fix your solution if needed.", sees: all}
    final: {rule: last, roles: [solver]}

Fields of a schedule entry: ``role`` (defined under ``roles``), ``stage`` (default: the role name),
``instruction``, ``sees`` (``all``: every earlier message, same round included; ``previous_round``;
``latest``: each agent's latest message from earlier rounds; ``none``), ``sees_roles`` (only
messages of these roles), ``skippable`` (a speak/skip controller is asked first).
Final rules: ``last`` (the answer of the last spoken message of ``roles``) or ``plurality`` (the
answer with the most votes, ties to the earliest agent, over each agent of ``roles``: the answer of
its latest message; ``teamplay.envs.voting.plurality``). ``roles`` defaults to all roles. The old
name of ``plurality``, ``majority``, is read for one release with one warning line.

``traits`` (optional) lists what the protocol promises, by the names of
``teamplay.envs.protocols.traits.TRAITS`` (e.g. ``traits: [chain]``): credit methods that need a
trait accept the protocol; an unknown name is refused with the closest known one.

Loading validates everything and raises a one-line ``ConfigError`` naming the file and the field,
e.g. ``protocol.schedule[2].role: role 'critic' is not defined in roles (defined: solver, checker)``.
A team given to the env must have exactly the YAML's roles; it may change their counts.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from teamplay.agents.roles import Role, Team
from teamplay.envs.protocols.base import (
    Protocol,
    ProtocolState,
    RoleSpec,
    SkippableOptions,
    TurnSpec,
    latest_per_agent,
    plurality_of_latest,
)
from teamplay.envs.protocols.traits import check_traits
from teamplay.errors import ConfigError, TeamplayWarning
from teamplay.records import Message


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class YamlRole(_Strict):
    prompt: str = Field(min_length=1, description="System prompt of the role.")
    count: int = Field(1, ge=1, le=64, description="Agents of this role in the default team.")
    adapter: str | None = Field(None, description="LoRA adapter (None: named after the role).")
    trainable: bool = Field(True, description="Whether the trainer updates the role's adapter.")


class YamlTurn(_Strict):
    role: str = Field(description="Role acting in this round (all of its agents act).")
    stage: str | None = Field(None, description="Stage name recorded in messages (default: role).")
    instruction: str = Field(min_length=1, description="User instruction ending the chat.")
    sees: Literal["all", "previous_round", "latest", "none"] = Field(
        "all", description="Which earlier messages the agents see.")
    sees_roles: list[str] | None = Field(None, description="Only messages of these roles are seen.")
    skippable: bool = Field(False, description="Ask the speak/skip controller before these turns.")


class YamlFinal(_Strict):
    rule: Literal["last", "plurality"] = Field(description="How the final answer is chosen: 'last' or "
                                                           "'plurality' (most votes).")
    roles: list[str] | None = Field(None, description="Roles whose answers count (default: all).")


class ProtocolSpec(_Strict):
    """A YAML protocol file, validated."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$", description="Protocol name (lower-case id).")
    description: str = Field("", description="One line shown by `teamplay list`.")
    roles: dict[str, YamlRole] = Field(min_length=1, description="Roles by name, in protocol order.")
    schedule: list[YamlTurn] = Field(min_length=1, description="Rounds, in order.")
    final: YamlFinal = Field(description="Final-answer rule.")
    traits: list[str] = Field(default_factory=list, description=(
        "What the protocol promises, for credit methods that need it (teamplay.envs.protocols.traits), "
        "e.g. [chain]."))


def load_yaml_protocol(path: str | Path, **options: Any) -> YamlProtocol:
    """Parse, validate and build the protocol in ``path``; ``ConfigError`` on any problem."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read protocol file: {exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{where}: malformed YAML: {problem}") from None
    return YamlProtocol(parse_spec(data, source=str(path)), **options)


def parse_spec(data: Any, source: str = "protocol") -> ProtocolSpec:
    """Validate already parsed YAML ``data``; errors read ``<source>: protocol.<field>: <why>``."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: protocol: expected a mapping with name, roles, schedule, final; "
                          f"got {type(data).__name__}")
    data = _renamed_final_rule(data, source)
    try:
        spec = ProtocolSpec.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = _loc(err["loc"])
        if err["type"] == "extra_forbidden":
            raise ConfigError(f"{source}: protocol{where}: unknown field") from None
        raise ConfigError(f"{source}: protocol{where}: {err['msg']} (got {err.get('input')!r})") from None
    defined = list(spec.roles)
    for name in defined:
        try:
            Role(name=name)
        except ValidationError:
            raise ConfigError(f"{source}: protocol.roles.{name}: role names must be lower-case "
                              f"identifiers such as 'solver'") from None

    def check(role: str, where: str) -> None:
        if role not in spec.roles:
            raise ConfigError(f"{source}: protocol.{where}: role {role!r} is not defined in roles "
                              f"(defined: {', '.join(defined)})")

    for i, turn in enumerate(spec.schedule):
        check(turn.role, f"schedule[{i}].role")
        for j, seen in enumerate(turn.sees_roles or ()):
            check(seen, f"schedule[{i}].sees_roles[{j}]")
    for j, role in enumerate(spec.final.roles or ()):
        check(role, f"final.roles[{j}]")
    check_traits(spec.traits, f"{source}: protocol.traits")
    return spec


def _renamed_final_rule(data: Mapping[str, Any], source: str) -> Mapping[str, Any]:
    """``data`` with ``final.rule: majority`` (the old name of ``plurality``: it never meant more than
    half) read as ``plurality``, warning once; ``data`` itself otherwise."""
    final = data.get("final")
    if not (isinstance(final, Mapping) and final.get("rule") == "majority"):
        return data
    warnings.warn(TeamplayWarning(f"{source}: protocol.final.rule 'majority' is now 'plurality' (most votes; "
                                  f"'majority' is kept for more than half); the old name is read until the next "
                                  f"release, then refused"), stacklevel=3)
    return {**data, "final": {**final, "rule": "plurality"}}


def _loc(loc: tuple[Any, ...]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc)


class YamlProtocol(Protocol):
    """A protocol defined by a validated ``ProtocolSpec`` (see the module docstring)."""

    Options = SkippableOptions

    def __init__(self, spec: ProtocolSpec, **options: Any) -> None:
        self.spec = spec
        self.name = spec.name  # type: ignore[misc]  # per-instance name of a data-defined protocol
        self.traits = frozenset(spec.traits)  # type: ignore[misc]  # checked by parse_spec
        super().__init__(**options)
        if self.options.controller is not None and not any(t.skippable for t in spec.schedule):
            raise ConfigError(f"protocol {spec.name!r}: option 'controller' given but no schedule "
                              f"entry is skippable; add `skippable: true` to an entry or drop it")
        self.__doc__ = spec.description or f"YAML protocol {spec.name}"

    def role_specs(self) -> tuple[RoleSpec, ...]:
        return tuple(RoleSpec(n, r.prompt, count=r.count) for n, r in self.spec.roles.items())

    def default_team(self) -> Team:
        return Team(roles=tuple(Role(name=n, count=r.count, adapter=r.adapter, trainable=r.trainable)
                                for n, r in self.spec.roles.items()))

    def schedule(self, team: Team) -> tuple[TurnSpec, ...]:
        return tuple(TurnSpec(a, e.role, e.stage or e.role, r)
                     for r, e in enumerate(self.spec.schedule) for a in team.role(e.role).agent_ids())

    def simultaneous(self, team: Team, round_turns: Sequence[TurnSpec]) -> bool:
        return len(round_turns) <= 1 or self.spec.schedule[round_turns[0].round].sees != "all"

    def visible(self, state: ProtocolState, turn: TurnSpec) -> list[Message]:
        entry = self.spec.schedule[turn.round]
        if entry.sees == "all":
            seen = state.spoken()
        elif entry.sees == "previous_round":
            seen = [m for m in state.spoken() if m.round == turn.round - 1]
        elif entry.sees == "latest":
            seen = latest_per_agent(state, self.agent_order(state.team), before_round=turn.round)
        else:
            seen = []
        if entry.sees_roles is not None:
            seen = [m for m in seen if m.role in entry.sees_roles]
        return seen

    def instruction(self, state: ProtocolState, turn: TurnSpec) -> str:
        return self.spec.schedule[turn.round].instruction

    def may_skip(self, state: ProtocolState, turn: TurnSpec) -> bool:
        return self.spec.schedule[turn.round].skippable

    def final_answer(self, state: ProtocolState) -> str | None:
        roles = self.spec.final.roles or list(self.spec.roles)
        if self.spec.final.rule == "plurality":
            agents = [a for a in self.agent_order(state.team) if state.team.role_of(a).name in roles]
            return plurality_of_latest(state, agents)
        last = next((m for m in reversed(state.messages) if m.spoke and m.role in roles), None)
        return last.answer if last is not None else None

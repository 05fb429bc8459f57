"""Roles and teams.

A ``Role`` is a kind of agent (proposer, reviewer, solver, debater, ...): its system prompt, how
many instances the team has, which LoRA adapter it writes with and whether that adapter trains.
A ``Team`` is the list of roles; agent instances are named ``<role>_<index>`` (``solver_2``).

Mixed teams: a role with ``policy: "scripted:noisy_proposer(p_right=0.5)"`` is played by that
scripted policy (``teamplay.agents.backends.scripted``) in training and evaluation while the other
roles generate with their LoRA adapters. A scripted role has no adapter: it is absent from
``Team.adapter_names()``, so it never enters the model, the optimiser or a checkpoint.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from teamplay.errors import ConfigError

#: why a team with nothing to train is refused (config load, run wiring, federated server)
NO_TRAINABLE_ROLE = ("team.roles: no role is trainable (set trainable: true on at least one role that "
                     "the model plays; scripted roles never train)")

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class Role(BaseModel):
    """One kind of agent in a team."""

    # strict: types are never converted, as in every config section (teamplay.config.base)
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: str = Field(description="Role name, lower-case identifier (e.g. 'proposer').")
    count: int = Field(1, ge=1, le=64, description="Number of agent instances of this role.")
    prompt: str | None = Field(
        None, description="System prompt; None uses the protocol's default prompt for this role.")
    adapter: str | None = Field(
        None, description="LoRA adapter this role writes with; roles naming the same adapter share "
                          "it. None means an adapter named after the role.")
    trainable: bool = Field(True, description="Whether the trainer updates this role's adapter.")
    model: str | None = Field(
        None, description="Base model of this role (hub id, local path or alias); None = the run's "
                          "model.name. Roles naming the same base share one copy of it.")
    policy: str | None = Field(
        None, description="'scripted:NAME' or 'scripted:NAME(key=value, ...)', e.g. "
                          "'scripted:noisy_proposer(p_right=0.5)': this role is played by a scripted "
                          "policy (no adapter, never trained); None: the model plays it.")

    @field_validator("policy")
    @classmethod
    def _check_policy(cls, value: str | None) -> str | None:
        if value is None:
            return value
        from teamplay.agents.backends.scripted import canonical_policy, parse_policy  # the policy registry

        kind, sep, spec = value.partition(":")
        if not sep or kind.strip() != "scripted":
            raise ValueError(f"policy {value!r}: expected 'scripted:NAME' or 'scripted:NAME(key=value)', "
                             f"e.g. 'scripted:noisy_proposer(p_right=0.5)'")
        canonical = canonical_policy(spec.strip())  # an old policy name: one warning, the new name kept
        try:
            parse_policy(canonical)
        except ValueError as exc:  # the message names the field: config errors may not show its path
            raise ValueError(f"policy {value!r}: {exc}") from None
        return value if canonical == spec.strip() else f"scripted:{canonical}"

    @model_validator(mode="after")
    def _scripted_has_no_adapter(self) -> Role:
        if self.policy is not None and self.adapter is not None:
            raise ValueError(f"role {self.name!r}: a scripted role (policy {self.policy!r}) has no adapter; "
                             f"remove `adapter`")
        return self

    @property
    def scripted(self) -> bool:
        """True when a scripted policy plays this role instead of the model."""
        return self.policy is not None

    @property
    def scripted_spec(self) -> str | None:
        """The policy spec after ``scripted:`` (``"noisy_proposer(p_right=0.5)"``), or None."""
        return self.policy.partition(":")[2].strip() if self.policy is not None else None

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError(f"role name {value!r} must be a lower-case identifier such as 'proposer'")
        return value

    @property
    def adapter_name(self) -> str:
        return self.adapter or self.name

    def agent_ids(self) -> list[str]:
        return [f"{self.name}_{i}" for i in range(self.count)]


class Team(BaseModel):
    """The roles of a team, in protocol order."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    roles: tuple[Role, ...] = Field(description="Roles of the team; names must be unique.")

    @field_validator("roles", mode="before")
    @classmethod
    def _yaml_list(cls, value: object) -> object:
        # YAML has lists only, and strict mode takes a tuple field from a tuple alone
        return tuple(value) if isinstance(value, list) else value

    @model_validator(mode="after")
    def _unique(self) -> Team:
        names = [r.name for r in self.roles]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"team.roles: role names must be unique, repeated: {dupes}")
        if not self.roles:
            raise ValueError("team.roles: a team needs at least one role")
        return self

    def role(self, name: str) -> Role:
        for r in self.roles:
            if r.name == name:
                return r
        raise KeyError(name)

    def agent_ids(self) -> list[str]:
        return [a for r in self.roles for a in r.agent_ids()]

    def role_of(self, agent: str) -> Role:
        """The role of agent instance ``agent`` (``"solver_2"`` -> role ``solver``)."""
        name, _, index = agent.rpartition("_")
        role = self.role(name)
        if not index.isdigit() or int(index) >= role.count:
            raise KeyError(agent)
        return role

    def bases(self, default: str) -> dict[str, tuple[str, ...]]:
        """Base model -> the roles that use it (``default`` for roles naming none), in role order.

        Raises ValueError when roles sharing an adapter name different bases (an adapter belongs
        to one base model)."""
        out: dict[str, list[str]] = {}
        owner: dict[str, str] = {}
        for r in self.roles:
            base = r.model or default
            if owner.setdefault(r.adapter_name, base) != base:
                raise ValueError(f"team.roles: adapter {r.adapter_name!r} is shared by roles on different "
                                 f"base models ({owner[r.adapter_name]!r} and {base!r}); give them separate adapters")
            out.setdefault(base, []).append(r.name)
        return {base: tuple(names) for base, names in out.items()}

    def adapter_names(self) -> tuple[str, ...]:
        """Distinct adapters of the model-played roles, in role order (scripted roles have none)."""
        return tuple(dict.fromkeys(r.adapter_name for r in self.roles if not r.scripted))

    def require_trainable(self) -> None:
        """Refuse (ConfigError) a team in which nothing can learn: every role frozen or scripted.
        The one statement of this rule; the config, the run wiring and the federated server ask it."""
        if not any(role.trainable and not role.scripted for role in self.roles):
            raise ConfigError(NO_TRAINABLE_ROLE)

    def scripted_roles(self) -> dict[str, str]:
        """{role name: policy spec} of the roles a scripted policy plays."""
        return {r.name: r.scripted_spec for r in self.roles if r.scripted_spec is not None}

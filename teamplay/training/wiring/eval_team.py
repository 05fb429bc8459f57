"""The team that ``eval``, ``play`` and ``serve`` put to work, built from an ``EvalConfig``.

One place builds it, so the three commands (and the benchmarks that call them) mean the same
thing by a config: the task's items, the speak/skip controllers with their tables from
``model.checkpoint``, the env factory, the team and the backend. The always-speak baseline that
``eval`` prints beside a controlled team is the same team with only the controller changed
(``EvalTeam.always_speak_env``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from teamplay.agents.backends.base import GenerationBackend
from teamplay.agents.roles import Role, Team
from teamplay.config import EvalConfig, ProtocolConfig
from teamplay.envs.tasks.base import Task
from teamplay.envs.team_env import TeamEnv
from teamplay.errors import ConfigError
from teamplay.records import TaskItem
from teamplay.training.play.controllers import TeamControllers
from teamplay.training.wiring.backend import build_backend
from teamplay.training.wiring.controllers import load_controllers
from teamplay.training.wiring.envs import env_factory, load_items


@dataclass(frozen=True)
class EvalTeam:
    """What an ``EvalConfig`` builds.

    Fields:
        task, items: the task and the problems of its split (``task.limit`` applied).
        controllers: the speak/skip controllers (``None`` where ``controllers.enabled`` is off).
        make_env: a new ``TeamEnv`` per episode, its controller in the configured (or given) mode.
        team: the roles, as ``make_env``'s envs seat them.
        backend: who generates for the team (adapters of ``model.checkpoint`` loaded).
        protocol: the protocol section, kept to build the baseline's env factory.
    """

    task: Task
    items: list[TaskItem]
    controllers: TeamControllers | None
    make_env: Callable[[], TeamEnv]
    team: Team
    backend: GenerationBackend
    protocol: ProtocolConfig

    def always_speak_env(self) -> Callable[[], TeamEnv] | None:
        """The same team's env factory with every agent speaking (``None`` without controllers):
        the baseline a controlled team's tokens saved are counted against."""
        if self.controllers is None:
            return None
        make_env, _ = env_factory(self.task, self.protocol, self.team,
                                  controller=self.controllers.controller("always_speak"))
        return make_env

    def solo_env(self) -> tuple[Callable[[], TeamEnv], Role]:
        """The self-consistency baseline's env factory and its role (``solo_env_factory``)."""
        return solo_env_factory(self.task, self.team, self.make_env().protocol.answer_roles)


def answering_role(team: Team, answer_roles: Sequence[str] | None) -> Role:
    """The role whose answer is the team's: the first of the protocol's ``answer_roles`` (the first
    role of ``team`` when every role answers)."""
    return team.role(answer_roles[0]) if answer_roles else team.roles[0]


def solo_env_factory(task: Task, team: Team, answer_roles: Sequence[str] | None) -> tuple[Callable[[], TeamEnv], Role]:
    """The self-consistency baseline's env factory: the answering role of ``team`` alone, as the
    ``single`` protocol's solver on ``task``, writing with that role's adapter (and base model); and
    that role.

    Raises ConfigError when the answering role is a scripted role of a mixed team (its policy is
    keyed by its role name, which the solo solver does not carry)."""
    role = answering_role(team, answer_roles)
    if role.scripted:
        raise ConfigError(f"self_consistency: the answering role {role.name!r} is played by "
                          f"{role.policy!r}; the baseline samples a model-played role")
    solo = Team(roles=(Role(name="solver", adapter=role.adapter_name, model=role.model),))
    make_env, _ = env_factory(task, ProtocolConfig(name="single"), solo)
    return make_env, role


def build_eval_team(cfg: EvalConfig, item_limit: int | None = None,
                    controller_mode: str | None = None) -> EvalTeam:
    """The ``EvalTeam`` of ``cfg``; ``item_limit`` replaces ``task.limit``, ``controller_mode``
    overrides the configured controller mode."""
    task_cfg = cfg.task if item_limit is None else cfg.task.model_copy(update={"limit": item_limit})
    task, items = load_items(task_cfg)
    controllers = load_controllers(cfg.controllers, cfg.model.checkpoint) if cfg.controllers.enabled else None
    make_env, team = env_factory(task, cfg.protocol, cfg.team,
                                 controller=controllers.controller(controller_mode) if controllers else None)
    backend = build_backend(cfg.model, cfg.backend, team, max_new_tokens=cfg.sampling.max_new_tokens)
    return EvalTeam(task, items, controllers, make_env, team, backend, cfg.protocol)

"""The wiring of a curriculum stage's training episodes (``stage_run``): the run's own wiring with
the stage's task, items, env factory and, where its scripted policies differ, backend
(``teamplay.config.curriculum`` says what a stage overrides)."""

from __future__ import annotations

import dataclasses

from teamplay.agents.backends.mixed import MixedBackend
from teamplay.agents.roles import Team
from teamplay.config import ProtocolConfig
from teamplay.envs.tasks.base import Task
from teamplay.records import TaskItem
from teamplay.training.wiring.backend import mixed_backend
from teamplay.training.wiring.envs import env_factory
from teamplay.training.wiring.wired_run import WiredRun


def stage_run(base: WiredRun, protocol: ProtocolConfig, team: Team | None,
              data: tuple[Task, list[TaskItem]]) -> WiredRun:
    """The wiring of a curriculum stage's training episodes: ``base`` (the run's own, ``build_run``)
    with the stage's task and items ``data`` (the caller loads them from the stage's task section:
    ``load_items``), a factory of envs with the stage's ``protocol`` and ``team`` sections
    (``teamplay.config.curriculum.stage_sections``; the controllers' training mode as in ``base``)
    and, when the stage's scripted policies differ from the run's, a backend that plays them beside
    the run's model backend (same model, same adapters). The held-out side (``eval_task``,
    ``eval_items``, ``make_eval_env``) stays the run's own."""
    task, items = data
    controller = base.controllers.controller("train") if base.controllers is not None else None
    make_env, played = env_factory(task, protocol, team, controller=controller)
    backend = base.backend
    if played.scripted_roles() != base.team.scripted_roles():
        # the config check kept the scripted roles, so the run's backend is mixed around its model's
        assert isinstance(backend, MixedBackend)
        backend = mixed_backend(backend.model, played)
    return dataclasses.replace(base, task=task, items=items, make_env=make_env, team=played, backend=backend)

"""A whole training run wired from its config (``build_run`` -> ``WiredRun``): the composition
root every entry point that trains builds its run through, from the modules of this room that
each build one kind of thing."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from teamplay.agents.backends.base import GenerationBackend
from teamplay.agents.roles import Team
from teamplay.config import TrainConfig
from teamplay.envs.tasks.base import Task
from teamplay.envs.team_env import TeamEnv
from teamplay.errors import ConfigError
from teamplay.records import SamplingParams, TaskItem
from teamplay.training.play.controllers import TeamControllers
from teamplay.training.wiring.backend import build_backend, mixed_backend
from teamplay.training.wiring.envs import env_factory, load_items
from teamplay.training.wiring.model import build_team_model
from teamplay.training.wiring.placement import Placement, driver_placement, model_device
from teamplay.training.wiring.sampling import rollout_sampling


@dataclass
class WiredRun:
    """Everything a training run is wired from (see ``build_run``)."""

    task: Task
    items: list[TaskItem]
    eval_task: Task
    eval_items: list[TaskItem]
    controllers: TeamControllers | None
    team: Team
    make_env: Callable[[], TeamEnv]
    make_eval_env: Callable[[], TeamEnv]
    team_model: Any
    backend: GenerationBackend
    #: the training rollouts' decoding (``rollout_sampling``)
    sampling: SamplingParams
    #: whether ``build_run`` built ``backend`` (the run closes it when it ends: a vLLM engine's
    #: processes and KV cache) or the caller passed it in (it stays the caller's to close)
    owns_backend: bool

    @contextmanager
    def closed_on_error(self) -> Iterator[WiredRun]:
        """Build the rest of a run inside this: when anything raises, the backend the run built
        (``owns_backend``) is closed before the error propagates, so a run that fails to start
        leaves no vLLM engine behind; a backend passed in stays open, the caller's to close."""
        try:
            yield self
        except BaseException:
            if self.owns_backend:
                self.backend.close()
            raise


def build_run(cfg: TrainConfig, team_model=None, backend: GenerationBackend | None = None,
              task: Task | None = None, items: Sequence[TaskItem] | None = None,
              eval_items: Sequence[TaskItem] | None = None, backend_name: str | None = None,
              placement: Placement | None = None) -> WiredRun:
    """Wire a training run from its config: items, controllers, env factories (training decides with
    the controllers' "train" mode, held-out evaluation as ``teamplay eval`` would), the team model
    and backend (built unless given: ``owns_backend``; built last, so a refused run never opens
    one, and ``WiredRun.closed_on_error`` closes it when what is built from the parts fails), and
    the rollouts' decoding.

    ``task`` with ``items`` (and ``eval_items``) replace the config's task sections, for a task
    defined in Python. Errors are ConfigErrors raised before the model loads. ``backend_name``
    replaces ``backend.name`` for this process's backend (the driver of a distributed run generates
    with hf, whatever its workers use). ``placement`` is the kind of process this driver is, which
    places the team model it builds (``placement.model_device``); None: ``driver_placement`` of
    ``cfg.distributed``.
    """
    if task is not None:
        if not items:
            raise ConfigError("Trainer(task=...) needs the training items too (items=[...])")
        train_task, train_items = task, list(items)
        eval_task, held_out = task, list(eval_items or [])
    else:
        train_task, train_items = load_items(cfg.task)
        eval_task, held_out = train_task, []
        if cfg.eval_task is not None:
            eval_task, held_out = load_items(cfg.eval_task)
    if not train_items:
        raise ConfigError("task: no training items were loaded")
    controllers = TeamControllers(cfg.controllers) if cfg.controllers.enabled else None
    make_env, team = env_factory(train_task, cfg.protocol, cfg.team,
                                 controller=controllers.controller("train") if controllers else None)
    if controllers is not None:
        make_eval_env, _ = env_factory(eval_task, cfg.protocol, team, controller=controllers.controller())
    elif eval_task is not train_task:
        make_eval_env, _ = env_factory(eval_task, cfg.protocol, team)
    else:
        make_eval_env = make_env
    team.require_trainable()  # the protocol's default team too, before the model loads
    if team_model is None:
        where = driver_placement(cfg.distributed) if placement is None else placement
        team_model = build_team_model(cfg.model, team, cfg.seed, device=model_device(where, cfg.model))
    sampling = rollout_sampling(cfg.sampling, cfg.credit.token)  # before the backend: nothing after it may fail
    owns_backend = backend is None
    if backend is None:
        backend_cfg = cfg.backend if backend_name is None else cfg.backend.model_copy(update={"name": backend_name})
        backend = build_backend(cfg.model, backend_cfg, team, team_model=team_model,
                                max_new_tokens=max(cfg.sampling.max_new_tokens, cfg.eval_sampling.max_new_tokens))
    else:
        backend = mixed_backend(backend, team)  # a given model backend still plays only the LLM roles
    return WiredRun(task=train_task, items=train_items, eval_task=eval_task, eval_items=held_out,
                    controllers=controllers, team=team, make_env=make_env, make_eval_env=make_eval_env,
                    team_model=team_model, backend=backend, sampling=sampling, owns_backend=owns_backend)


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch's global generators (torch picks a random seed per process
    otherwise). Rollouts and minibatch orders use their own seeded generators; this covers
    everything else, e.g. a user's task code."""
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)

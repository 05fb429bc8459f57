"""The two parts a ``Trainer`` is composed from: a ``Runner`` that produces episodes and a
``Learner`` that applies updates and owns the optimiser and schedule.

The trainer keeps what makes a run a run (data order, credit, metrics, evaluation bookkeeping,
checkpoints); everything that differs between an in-process run and a run on a cluster lives
behind these two interfaces. A ``PartsFactory`` builds both once the run is wired
(``wiring.wired_run.build_run``); the in-process pair is built by ``local_parts.local_parts``, the Ray pair by
``teamplay.distributed.parts``, and ``teamplay.distributed.compose.make_trainer`` picks one from the
config. A trainer never learns which pair it holds.

Life of the parts in a run: ``Learner.share_state(version)`` before the first step or evaluation,
and again after a resume (a cluster sends the adapters and optimiser state out; in-process nothing
moves); per step ``Runner.run`` -> credit -> ``Learner.update`` -> ``Learner.end_step``;
``Learner.checkpoint_state()`` when a checkpoint is written; ``close()`` of both when ``train``
returns (the in-process runner also closes the backend the run built; a Ray run's driver generates
with hf, which holds nothing to free, and its rollout workers are killed with their backends).
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch

from teamplay.config import OptimConfig, TrainConfig
from teamplay.records import Episode, SamplingParams
from teamplay.training.learn.samples import PolicySample
from teamplay.training.play.rollout import RolloutJob


class EpisodeSource(Protocol):
    """Anything that turns jobs into episodes (``RolloutRunner.run``'s signature)."""

    def run(self, jobs: Sequence[RolloutJob], seed: int = 0,
            on_episode: Callable[[Episode], None] | None = None) -> list[Episode]: ...


class Runner(EpisodeSource, Protocol):
    """Produces a run's episodes: ``run`` the training episodes (sampled, training envs);
    ``held_out(sampling, before_generate)`` a source of held-out episodes (evaluation envs and
    decoding; ``before_generate`` is called at each safe point, and may raise to abandon the
    evaluation); ``step_metrics()`` what the last ``run`` adds to the step's metrics (e.g. worker
    restarts); ``generation(run, learner)`` what an asynchronous run's generator thread generates
    with instead of ``run`` (``asynchronous.rollouts.AheadGeneration``; ``run`` the run's wiring, ``learner``
    this runner's learner); ``close()`` frees what the runner holds (idempotent)."""

    def held_out(self, sampling: SamplingParams, before_generate: Callable[[], None] | None) -> EpisodeSource: ...

    def step_metrics(self) -> dict[str, Any]: ...

    def generation(self, run: Any, learner: Learner) -> Any: ...

    def close(self) -> None: ...


class Learner(Protocol):
    """Applies a step's update and owns the optimiser and learning-rate schedule.

    ``update(samples, step)`` runs every epoch and minibatch of the step and returns its metrics (at
    least ``optimizer_steps``; an optimiser step it skipped for a non-finite loss or gradient is
    listed in ``nonfinite_skips``). It applies per-message token rules (``PolicySample.token_rule``)
    inside its update and leaves the token advantages it computed in ``resolved_tokens`` (by index
    into ``samples``). ``end_step()`` advances the schedule (once per trainer step, also when no
    update happened); ``lr`` is the current learning rate. ``share_state(version)`` makes every copy
    of the adapters and optimiser state equal to the trainer's team model (before the first step or
    evaluation, and after a resume). ``checkpoint_state()`` returns the optimiser and scheduler
    whose state a checkpoint saves; ``load_state(optimizer, scheduler)`` restores them from one
    (raising ValueError/KeyError/TypeError when they do not fit).
    """

    resolved_tokens: dict[int, tuple[float, ...]]
    params: dict[str, list[torch.nn.Parameter]]

    @property
    def lr(self) -> float: ...

    def update(self, samples: Sequence[PolicySample], step: int) -> dict[str, Any]: ...

    def end_step(self) -> None: ...

    def share_state(self, version: int) -> None: ...

    def checkpoint_state(self) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]: ...

    def load_state(self, optimizer: dict[str, Any], scheduler: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


class PartsFactory(Protocol):
    """Builds a run's ``(Runner, Learner)`` from its wiring (``wiring.wired_run.WiredRun``) and trainable
    adapters. ``driver_backend`` names the generation backend of the trainer's own process when it
    must differ from the config's (``None``: the config's)."""

    driver_backend: str | None

    def __call__(self, cfg: TrainConfig, run: Any, trainable: Sequence[str]) -> tuple[Runner, Learner]: ...


# ------------------------------------------------------------------------------ the optimiser
def build_optimizer(optim: OptimConfig, params: Sequence[torch.nn.Parameter]) -> torch.optim.AdamW:
    """The AdamW every learner uses (the trainer's, and each learner rank's) over ``params`` in the
    order given (adapters in ``trainable`` order, each adapter's parameters in model order)."""
    return torch.optim.AdamW(list(params), lr=optim.lr, weight_decay=optim.weight_decay)


def lr_factor(optim: OptimConfig, steps: int) -> Callable[[int], float]:
    """The learning-rate multiplier of trainer step ``step``: linear warm-up over
    ``optim.warmup_steps``, then constant, linear decay to 0 or half-cosine to 0 at ``steps`` (the
    run's)."""

    def factor(step: int) -> float:
        if optim.warmup_steps and step < optim.warmup_steps:
            return (step + 1) / optim.warmup_steps
        if optim.schedule == "constant":
            return 1.0
        progress = min(1.0, (step - optim.warmup_steps) / max(1, steps - optim.warmup_steps))
        if optim.schedule == "linear":
            return 1.0 - progress
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor


def advance(scheduler: torch.optim.lr_scheduler.LRScheduler) -> None:
    """One schedule step. It advances per trainer step, also when the step made no optimiser update
    (all groups without signal): torch warns about that order, which is intended here."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=re.escape("Detected call of `lr_scheduler.step()`"))
        scheduler.step()


# ------------------------------------------------------------------------------ what every learner owns
class OptimizerOwner:
    """What every learner owns: the trainable adapters' parameters of the trainer's team model (by
    adapter, ``trainable`` order), their AdamW (``optim``) and the learning-rate schedule over the
    run's ``steps``."""

    def __init__(self, optim: OptimConfig, steps: int, team_model, trainable: Sequence[str]) -> None:
        self.params = {a: team_model.adapter_parameters(a) for a in trainable}
        self.optimizer = build_optimizer(optim, [p for a in trainable for p in self.params[a]])
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_factor(optim, steps))

    @property
    def lr(self) -> float:
        return self.scheduler.get_last_lr()[0]

    def end_step(self) -> None:
        advance(self.scheduler)

    def checkpoint_state(self) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
        return self.optimizer, self.scheduler

    def load_state(self, optimizer: dict[str, Any], scheduler: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(optimizer)
        self.scheduler.load_state_dict(scheduler)

"""The distributed trainer: the single-process trainer's step, with its rollouts on Ray workers and
its update on a data-parallel learner.

The driver (this process) keeps what makes a run a run: the data order, the schedule, credit,
metrics, evaluation bookkeeping and checkpoints, all exactly as ``Trainer`` does them. Two parts
of a step move out:

- rollouts: ``RolloutPool`` (``distributed.rollout_workers`` actors, each with its own backend),
  or for a heterogeneous team ``BaseGroupsPool`` (that many actors per base model, each loading
  only its base; the lock-step runner runs here and routes each generate call by adapter); the
  episodes land in the driver, where credit runs on them before the learner sees a sample;
- the update: ``LearnerGroup`` (``distributed.learner_workers`` torch.distributed ranks).

After an update the driver takes rank 0's adapters (adapter-only, versioned ``AdapterWeights``),
loads them into its own copy of the team model and publishes them to the rollout workers. The
driver's copy is what checkpoints write, with rank 0's optimiser state, so a checkpoint has the
single-process format: a run resumes single-process or distributed, either way.

Speak/skip controllers are refused for now: their tables learn in the driver and would have to
travel to the workers with the adapters.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from torch.optim.lr_scheduler import LRScheduler

from teamplay.config import TrainConfig
from teamplay.distributed.cluster import check_capacity, connect, import_ray
from teamplay.distributed.groups import BaseGroupsPool
from teamplay.distributed.learner import LearnerGroup
from teamplay.distributed.rollout import RolloutPool, WorkerSpec
from teamplay.distributed.weights import AdapterWeights
from teamplay.envs.tasks.base import Task
from teamplay.errors import ConfigError
from teamplay.records import Episode, TaskItem
from teamplay.training.evaluation import EvalMetrics, evaluate
from teamplay.training.samples import PolicySample
from teamplay.training.setup import rollout_sampling, sampling_params
from teamplay.training.trainer import StepResult, Trainer, TrainResult


class DistributedTrainer(Trainer):
    """``Trainer`` on a Ray cluster; ``cfg.distributed`` must be set (see ``DistributedConfig``)."""

    # each learner rank scores only its share of a minibatch: token statistics are computed in the
    # driver before the update (the statistics pass), not resolved inside it
    resolves_token_rules = False

    def __init__(self, cfg: TrainConfig, task: Task | None = None, items: Sequence[TaskItem] | None = None,
                 eval_items: Sequence[TaskItem] | None = None,
                 on_step: Callable[[int, dict[str, Any]], None] | None = None,
                 on_eval: Callable[[str], None] | None = None) -> None:
        dist = cfg.distributed
        if dist is None:
            raise ConfigError("distributed: DistributedTrainer needs a `distributed:` config section")
        self._owns_cluster = False
        self.pool: RolloutPool | BaseGroupsPool | None = None
        self.learner: LearnerGroup | None = None
        # the driver's own backend only serves credit methods that re-generate: hf, whatever the
        # workers use (a vLLM engine in the driver would take a GPU the workers need). Built first:
        # a run that cannot work is refused before a cluster starts.
        driver_cfg = cfg.model_copy(update={"backend": cfg.backend.model_copy(update={"name": "hf"})})
        super().__init__(driver_cfg, task=task, items=items, eval_items=eval_items, on_step=on_step,
                         on_eval=on_eval)
        self.cfg = cfg
        try:
            self._owns_cluster = connect(dist)
            # a heterogeneous team: one worker group per base that owns an adapter
            owner = {a: self.team_model.base_of(a) for a in self.team_model.adapter_names} \
                if hasattr(self.team_model, "base_of") else None
            check_capacity(dist, groups=len(set(owner.values())) if owner else 1)
            spec = WorkerSpec(model=cfg.model, backend=cfg.backend, team=self.team, seed=cfg.seed,
                              make_envs={"train": self.make_env, "eval": self.make_eval_env},
                              max_batch=cfg.backend.max_batch,
                              max_new_tokens=max(cfg.sampling.max_new_tokens, cfg.eval_sampling.max_new_tokens))
            if owner:
                self.pool = BaseGroupsPool(spec, owner, dist.rollout_workers, dist.resources.rollout,
                                           rollout_sampling(cfg), max_staleness=dist.max_staleness,
                                           max_restarts=dist.max_restarts)
            else:
                self.pool = RolloutPool(spec, dist.rollout_workers, dist.resources.rollout,
                                        rollout_sampling(cfg), max_staleness=dist.max_staleness,
                                        max_restarts=dist.max_restarts)
            self.runner = self.pool  # Trainer.step calls self.runner.run(jobs, seed=...)
            self.learner = LearnerGroup(cfg, self.team)
            # the update stage calls self.updater.update(samples, step) (a Learner)
            self.updater = DriverLearner(self.learner, self.pool, self.team_model, self.scheduler)
        except BaseException:
            self.shutdown()
            raise
        self._pushed = False

    # ------------------------------------------------------------------------------ loop
    def train(self, resume: str | None = None, overwrite: bool = False) -> TrainResult:
        try:
            return super().train(resume, overwrite)
        finally:
            self.shutdown()

    def step(self) -> StepResult:
        if not self._pushed:
            self._push_state()
        result = super().step()
        assert self.pool is not None
        metrics = result.metrics
        events = self.pool.last_events
        metrics["rollout_episodes"] = self.pool.last_stats.episodes if self.pool.last_stats else 0
        metrics["rollout_restarts"] = len(events)
        if events:
            metrics["rollout_restart_events"] = [dataclasses.asdict(e) for e in events]
        # the adapter version the step's rollouts used (<= the published one; equal without staleness)
        metrics["rollout_weights_version"] = self.pool.last_versions
        metrics["weights_version"] = self.pool.version
        metrics["rollout_sync_bytes"] = self.pool.sync_bytes
        return result

    def _push_state(self) -> None:
        """Send the driver's adapters and optimiser state (fresh, or just resumed) to every worker."""
        assert self.learner is not None and self.pool is not None
        weights = AdapterWeights.of(self.team_model, version=self.state.step)
        self.learner.load_state(weights, self.optimizer.state_dict())
        self.pool.publish(weights)
        self._pushed = True

    def _resume(self, resume: str) -> Path | None:
        path = super()._resume(resume)
        self._pushed = False  # the resumed adapters and optimiser state go out before the next step
        return path

    def _checkpoint(self) -> Path:
        assert self.learner is not None
        self.optimizer.load_state_dict(self.learner.optimizer_state())  # rank 0's, same parameter order
        return super()._checkpoint()

    def _evaluate(self, label: str, items: Sequence[TaskItem] | None = None) -> EvalMetrics:
        if not self._pushed:
            self._push_state()
        if self.on_eval is not None:
            self.on_eval(label)
        runner = _EvalRunner(self.pool, sampling_params(self.cfg.eval_sampling))
        _, metrics = evaluate(runner, self.eval_task, self.eval_items if items is None else items,
                              seed=self.cfg.seed)
        return metrics

    def shutdown(self) -> None:
        """End this run's actors (and the cluster, if this trainer started it)."""
        if self.pool is not None:
            self.pool.shutdown()
            self.pool = None
        if self.learner is not None:
            self.learner.shutdown()
            self.learner = None
        if self._owns_cluster:
            import_ray().shutdown()
            self._owns_cluster = False


class DriverLearner:
    """The distributed step's ``Learner`` (the trainer's ``updater``): the learner group's update at
    the driver's current learning rate; after an optimiser step, rank 0's adapters (versioned
    ``step + 1``) go into the driver's copy of the team model, which checkpoints and credit read,
    and out to the rollout workers."""

    def __init__(self, learner: LearnerGroup, pool: RolloutPool | BaseGroupsPool, team_model,
                 scheduler: LRScheduler) -> None:
        self.learner, self.pool, self.team_model, self.scheduler = learner, pool, team_model, scheduler

    def update(self, samples: Sequence[PolicySample], step: int) -> dict[str, Any]:
        out = self.learner.update(samples, step, self.scheduler.get_last_lr()[0])
        if out["optimizer_steps"]:
            weights = self.learner.weights(version=step + 1)
            weights.apply(self.team_model)
            self.pool.publish(weights)
            out["adapter_sync_bytes"] = weights.nbytes
        return out


class _EvalRunner:
    """The pool seen as a runner of held-out episodes (eval envs, eval decoding)."""

    def __init__(self, pool: RolloutPool, sampling) -> None:
        self.pool, self.sampling = pool, sampling

    def run(self, jobs, seed: int = 0, on_episode: Callable[[Episode], None] | None = None) -> list[Episode]:
        return self.pool.run(jobs, seed=seed, on_episode=on_episode, env="eval", sampling=self.sampling)

"""A trainer's parts on a Ray cluster: rollouts on worker actors, the update on a data-parallel
learner group (``teamplay.training.run.parts`` defines the two interfaces).

The trainer (in the driver process) keeps what makes a run a run: the data order, the schedule,
credit, metrics, evaluation bookkeeping and checkpoints, exactly as in-process. Two parts of a step
move out:

- rollouts: ``PoolRunner`` over a ``RolloutPool`` (``distributed.rollout_workers`` actors, each with
  its own backend), or for a heterogeneous team a ``BaseGroupsPool`` (that many actors per base
  model, each loading only its base; the lock-step runner runs in the driver and routes each
  generate call by adapter); the episodes land in the driver, where credit runs on them before
  the learner sees a sample;
- the update: ``DriverLearner`` over a ``LearnerGroup`` (``distributed.learner_workers``
  torch.distributed ranks).

After an update the driver takes rank 0's adapters (adapter-only, versioned ``AdapterWeights``),
loads them into its own copy of the team model and publishes them to the rollout workers. The
driver's copy is what checkpoints write, with rank 0's optimiser state, so a checkpoint has the
single-process format: a run resumes single-process or distributed, either way.

The driver's own backend only serves credit methods that re-generate: hf, whatever the workers use
(a vLLM engine in the driver would take a GPU the workers need).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from teamplay.config import OptimConfig, TrainConfig
from teamplay.distributed.async_pool import PoolGeneration
from teamplay.distributed.cluster import check_capacity, connect, import_ray, ship_user_code
from teamplay.distributed.groups import BaseGroupsPool
from teamplay.distributed.learner import LearnerGroup
from teamplay.distributed.rollout import RolloutPool, WorkerSpec
from teamplay.distributed.weights import AdapterWeights
from teamplay.errors import ConfigError
from teamplay.records import Episode, SamplingParams
from teamplay.training.learn.samples import PolicySample
from teamplay.training.play.rollout import RolloutJob
from teamplay.training.run.parts import OptimizerOwner
from teamplay.training.run.sections import update_settings
from teamplay.training.wiring.checks import asynchronous
from teamplay.training.wiring.wired_run import WiredRun

Pool = RolloutPool | BaseGroupsPool


class PoolRunner:
    """The ``Runner`` of a distributed run: training and held-out episodes from the worker pool.
    ``close`` ends the pool's actors and, when this run started the cluster, the cluster."""

    def __init__(self, pool: Pool | None, owns_cluster: bool) -> None:
        self.pool = pool
        self._owns_cluster = owns_cluster

    def run(self, jobs: Sequence[RolloutJob], seed: int = 0,
            on_episode: Callable[[Episode], None] | None = None) -> list[Episode]:
        return self._pool().run(jobs, seed=seed, on_episode=on_episode)

    def held_out(self, sampling: SamplingParams, before_generate: Callable[[], None] | None) -> HeldOut:
        # the pool has no safe point inside a run: a stop asked for during a held-out evaluation
        # takes effect when the evaluation returns
        return HeldOut(self._pool(), sampling)

    def generation(self, run: WiredRun, learner: DriverLearner) -> PoolGeneration:
        """The pool driven by an asynchronous run's generator thread (``async_pool``)."""
        return PoolGeneration(self, learner)

    def step_metrics(self) -> dict[str, Any]:
        """The last run's rollout episodes and worker restarts, and the adapter versions it used
        (``rollout_weights_version`` <= the published ``weights_version``; equal without staleness)."""
        pool = self._pool()
        events = pool.last_events
        out: dict[str, Any] = {"rollout_episodes": pool.last_stats.episodes if pool.last_stats else 0,
                               "rollout_restarts": len(events)}
        if events:
            out["rollout_restart_events"] = [dataclasses.asdict(e) for e in events]
        out.update(rollout_weights_version=pool.last_versions, weights_version=pool.version,
                   rollout_sync_bytes=pool.sync_bytes)
        return out

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()
            self.pool = None
        if self._owns_cluster:
            import_ray().shutdown()
            self._owns_cluster = False

    def _pool(self) -> Pool:
        if self.pool is None:
            raise RuntimeError("this run's rollout workers were shut down (the trainer was closed)")
        return self.pool


class HeldOut:
    """The pool seen as a source of held-out episodes (evaluation envs, evaluation decoding)."""

    def __init__(self, pool: Pool, sampling: SamplingParams) -> None:
        self.pool, self.sampling = pool, sampling

    def run(self, jobs: Sequence[RolloutJob], seed: int = 0,
            on_episode: Callable[[Episode], None] | None = None) -> list[Episode]:
        return self.pool.run(jobs, seed=seed, on_episode=on_episode, env="eval", sampling=self.sampling)


class DriverLearner(OptimizerOwner):
    """The ``Learner`` of a distributed run: the learner group's update at the driver's current
    learning rate. After an optimiser step, rank 0's adapters (versioned ``step + 1``) go into the
    driver's copy of the team model, which checkpoints and credit read, and out to the rollout
    workers. The driver's optimiser only holds rank 0's state for checkpoints (and the state a
    resumed run sends out); the schedule is the driver's.

    Per-message token rules are applied inside the ranks' update, each sample's by the rank that
    scores it; ``resolved_tokens`` holds the rows of the last update, joined over the ranks.

    ``optim`` and ``steps`` are the run's optimiser section and length (its ``OptimizerOwner``).
    ``published`` is the last adapters sent out (None before ``share_state``). With
    ``to_pool=False`` (asynchronous rollouts) they are only kept there: the generator thread
    publishes them to the pool itself, as the only thread calling into it (``async_pool``).
    """

    def __init__(self, optim: OptimConfig, steps: int, group: LearnerGroup, pool: Pool, team_model,
                 trainable: Sequence[str], to_pool: bool = True) -> None:
        super().__init__(optim, steps, team_model, trainable)
        self.group, self.pool, self.team_model = group, pool, team_model
        self.to_pool = to_pool
        self.published: AdapterWeights | None = None

    @property
    def resolved_tokens(self) -> dict[int, tuple[float, ...]]:
        return self.group.resolved_tokens

    def update(self, samples: Sequence[PolicySample], step: int) -> dict[str, Any]:
        out = self.group.update(samples, step, self.lr)
        if out["optimizer_steps"]:
            weights = self.group.weights(version=step + 1)
            weights.apply(self.team_model)
            self._publish(weights)
            out["adapter_sync_bytes"] = weights.nbytes
        return out

    def share_state(self, version: int) -> None:
        """The driver's adapters and optimiser state (fresh, or just resumed) to every rank and worker."""
        weights = AdapterWeights.of(self.team_model, version=version)
        self.group.load_state(weights, self.optimizer.state_dict())
        self._publish(weights)

    def _publish(self, weights: AdapterWeights) -> None:
        self.published = weights
        if self.to_pool:
            self.pool.publish(weights)

    def checkpoint_state(self):
        self.optimizer.load_state_dict(self.group.optimizer_state())  # rank 0's, same parameter order
        return self.optimizer, self.scheduler

    def close(self) -> None:
        self.group.shutdown()


class RayParts:
    """The ``PartsFactory`` of a ``distributed:`` run: connects to (or starts) the cluster, checks its
    capacity, starts the rollout workers and learner ranks. Anything that fails on the way ends
    what was started (and the cluster, if it started it)."""

    driver_backend = "hf"

    def __call__(self, cfg: TrainConfig, run: WiredRun, trainable: Sequence[str]) -> tuple[PoolRunner, DriverLearner]:
        dist = cfg.distributed
        if dist is None:
            raise ConfigError("distributed: Ray parts need a `distributed:` config section")
        owns_cluster = connect(dist)
        pool: Pool | None = None
        try:
            ship_user_code()  # a task, protocol or credit method from a user's file reaches the workers
            team_model = run.team_model
            # a heterogeneous team: one worker group per base that owns an adapter
            owner = ({a: team_model.base_of(a) for a in team_model.adapter_names}
                     if hasattr(team_model, "base_of") else None)
            check_capacity(dist, groups=len(set(owner.values())) if owner else 1)
            spec = WorkerSpec(model=cfg.model, backend=cfg.backend, team=run.team, seed=cfg.seed,
                              make_envs={"train": run.make_env, "eval": run.make_eval_env},
                              max_batch=cfg.backend.max_batch,
                              max_new_tokens=max(cfg.sampling.max_new_tokens, cfg.eval_sampling.max_new_tokens))
            limits = {"max_staleness": dist.max_worker_lag, "max_restarts": dist.max_restarts}
            if owner:
                pool = BaseGroupsPool(spec, owner, dist.rollout_workers, dist.resources.rollout,
                                      run.sampling, **limits)
            else:
                pool = RolloutPool(spec, dist.rollout_workers, dist.resources.rollout, run.sampling, **limits)
            runner = PoolRunner(pool, owns_cluster)
        except BaseException:
            PoolRunner(pool, owns_cluster).close()
            raise
        try:
            # asynchronous rollouts: the generator thread alone publishes to the pool (``async_pool``)
            to_pool = not asynchronous(cfg.rollout)
            ranks = LearnerGroup(update_settings(cfg), cfg.model, dist, run.team)
            return runner, DriverLearner(cfg.optim, cfg.steps, ranks, pool, team_model, trainable, to_pool)
        except BaseException:
            runner.close()
            raise


ray_parts = RayParts()

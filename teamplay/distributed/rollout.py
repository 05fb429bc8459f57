"""Rollout workers as Ray actors, and the pool that shares a step's jobs among them.

Each ``RolloutWorker`` owns a generation backend (its own copy of the base model with the team's
LoRA adapters: HF on CPU or GPU, or vLLM multi-LoRA on GPU) and runs the lock-step
``RolloutRunner`` on its share of the jobs. ``RolloutPool.run(jobs, seed)`` behaves like
``RolloutRunner.run``:

- jobs are cut into contiguous shards, one per worker; shard ``k`` starting at job ``o`` runs
  with seed ``seed + o``, so every env is reset with the seed the single-process runner gives it
  (job ``i`` -> ``seed + i``), and greedy episodes equal the single-process ones token for token;
- episodes come back in job order, each tagged with the adapter version that generated it
  (``metadata["weights_version"]``);
- a worker that dies mid-step (killed, out of memory) is replaced by a fresh actor, which loads
  the current adapters and re-runs that worker's whole shard. Nothing of the dead shard was kept,
  so no episode is counted twice; each restart is recorded in ``last_events`` (and the trainer's
  metrics). More than ``max_restarts`` restarts in one run call fail the step.

Weight sync is adapter-only (``AdapterWeights``). The pool holds the latest published version;
before a shard runs, a worker whose version lags by more than ``max_staleness`` loads it (Ray runs
an actor's calls in submission order, so the load completes before the shard starts).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from teamplay.agents.roles import Team
from teamplay.config import DEFAULT_MAX_RESTARTS, BackendConfig, ModelConfig, WorkerResources
from teamplay.distributed.actors import ActorGroup, OnActors
from teamplay.distributed.weights import AdapterWeights
from teamplay.records import Episode, Generation, TurnRequest
from teamplay.training.play.rollout import RolloutJob, RolloutRunner, RolloutStats


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a rollout worker needs to build itself (sent once, pickled by Ray).

    Fields:
        model, backend: the run's model and backend sections (the worker loads its own base).
        team: the validated team (one LoRA adapter per adapter name).
        seed: LoRA init seed (the same as the trainer's, so version 0 equals the trainer's adapters).
        make_envs: named env factories (``"train"``, ``"eval"``), each ``() -> TeamEnv``.
        max_batch: most requests per generate call.
        max_new_tokens: the most any generate call of the run asks for (sizes a vllm engine).
    """

    model: ModelConfig
    backend: BackendConfig
    team: Team
    seed: int
    make_envs: dict[str, Callable[[], Any]]
    max_batch: int | None = None
    max_new_tokens: int = 256


class RolloutWorker:
    """One rollout worker (the body of a Ray actor): a backend and a lock-step runner."""

    def __init__(self, spec: WorkerSpec) -> None:
        import torch

        from teamplay.training.wiring.backend import build_backend
        from teamplay.training.wiring.model import build_team_model
        from teamplay.training.wiring.placement import Placement, model_device

        torch.set_num_threads(1)  # a worker per core: intra-op threads would fight over the cores
        self.spec = spec
        device = model_device(Placement.RAY_ROLLOUT, spec.model, backend=spec.backend.name)
        self.team_model = build_team_model(spec.model, spec.team, spec.seed, device=device)
        self.backend = build_backend(spec.model, spec.backend, spec.team, team_model=self.team_model,
                                     max_new_tokens=spec.max_new_tokens)
        self.version = 0

    def pid(self) -> int:
        return os.getpid()

    def close(self) -> None:
        """Close the backend this worker built (a vLLM engine's processes and KV cache would
        otherwise outlive the actor that is killed after this call). Idempotent."""
        self.backend.close()

    def load_weights(self, weights: AdapterWeights) -> int:
        """Load a published adapter version; returns it."""
        weights.apply(self.team_model)
        self.backend.sync_adapters()  # a vLLM backend re-registers the adapters it serves
        self.version = weights.version
        return self.version

    def run(self, jobs: Sequence[RolloutJob], seed: int, sampling, env: str,
            min_version: int) -> tuple[list[Episode], RolloutStats, int]:
        """Run ``jobs`` to the end; returns the episodes, the runner's stats and the version used.

        Refuses to generate with adapters older than ``min_version`` (the staleness contract)."""
        if self.version < min_version:
            raise RuntimeError(f"rollout worker has adapter version {self.version}, needs >= {min_version}")
        runner = RolloutRunner(self.spec.make_envs[env], self.backend, sampling, max_batch=self.spec.max_batch)
        episodes = runner.run(jobs, seed=seed)
        return episodes, runner.last_stats, self.version

    def generate(self, requests: Sequence[TurnRequest], sampling,
                 min_version: int) -> tuple[list[Generation], int]:
        """One generate call of a runner that lives elsewhere (a worker of one base's group, see
        ``teamplay.distributed.groups``); returns the generations and the adapter version used.

        Refuses adapters older than ``min_version``, as ``run`` does."""
        if self.version < min_version:
            raise RuntimeError(f"rollout worker has adapter version {self.version}, needs >= {min_version}")
        return self.backend.generate(requests, sampling), self.version


@dataclass(frozen=True)
class RestartEvent:
    """A rollout worker died and was replaced.

    Fields:
        worker: index of the worker in the pool (in its base's group when ``base`` is set).
        pid: process id of the dead worker.
        jobs: jobs of its shard, all re-run by the new worker; for a worker of a base's group, the
            generation requests of the call it died in, all re-sent to the new worker.
        error: the Ray error type that reported the death.
        base: the base model of the worker's group ("" for the one group of a single-base team).
    """

    worker: int
    pid: int
    jobs: int
    error: str
    base: str = ""


def spend_restart(events: list[RestartEvent], max_restarts: int, event: RestartEvent, exc: BaseException) -> None:
    """The restart budget of one pool ``run`` call, for every pool: record ``event`` in ``events`` (the
    call's restarts so far), or raise RuntimeError when ``max_restarts`` of them were already spent."""
    if len(events) >= max_restarts:
        where = f" of base {event.base!r}" if event.base else ""
        raise RuntimeError(f"rollout worker {event.worker}{where} died and the step already restarted "
                           f"{len(events)} worker(s) (distributed.max_restarts={max_restarts}): {exc}") from None
    events.append(event)


class RolloutPool(OnActors):
    """``n`` rollout workers sharing each run's jobs; a drop-in for ``RolloutRunner.run``.

    Args:
        spec: how each worker builds itself.
        workers: number of workers (>= 1).
        resources: Ray resources per worker.
        sampling: decoding for ``run`` (the runner's ``sampling``).
        max_staleness: versions a worker may lag behind the published adapters.
        max_restarts: worker restarts allowed within one ``run`` call.
    """

    def __init__(self, spec: WorkerSpec, workers: int, resources: WorkerResources, sampling,
                 max_staleness: int = 0, max_restarts: int = DEFAULT_MAX_RESTARTS) -> None:
        self.spec = spec
        self.sampling = sampling
        self.max_staleness = max_staleness
        self.max_restarts = max_restarts
        self.actors = ActorGroup(RolloutWorker, lambda k: (spec,), workers, resources, max_staleness)
        self.last_stats: RolloutStats | None = None
        self.last_events: list[RestartEvent] = []
        self.last_versions: list[int] = []  # adapter versions the last run's shards used
        self.sync_bytes = 0  # adapter bytes sent to workers by the last run call

    # --------------------------------------------------------------------------- running
    def run(self, jobs: Sequence[RolloutJob], seed: int = 0,
            on_episode: Callable[[Episode], None] | None = None, env: str = "train",
            sampling=None) -> list[Episode]:
        """Every job run by some worker; episodes in job order (see the module docstring).

        ``on_episode`` is called for each episode once all shards are back (in job order);
        ``env`` names the worker's env factory and ``sampling`` replaces the pool's decoding."""
        start = time.perf_counter()
        sampling = sampling or self.sampling
        min_version = max(0, self.version - self.max_staleness)
        self.last_events = []
        self.sync_bytes = 0

        def submit(k: int, worker: Any, lo: int, hi: int) -> Any:
            self.sync_bytes += self.actors.sync(k)
            return worker.run.remote(list(jobs[lo:hi]), seed + lo, sampling, env, min_version)

        def died(k: int, exc: BaseException, lo: int, hi: int) -> None:
            event = RestartEvent(worker=k, pid=self.pids[k], jobs=hi - lo, error=type(exc).__name__)
            spend_restart(self.last_events, self.max_restarts, event, exc)

        results, _ = self.actors.map_chunks(len(jobs), submit, died)
        episodes: list[Episode] = []
        for k in sorted(results):
            eps, _, version = results[k]
            episodes.extend(dataclasses.replace(ep, metadata={**ep.metadata, "weights_version": version})
                            for ep in eps)
        if on_episode is not None:
            for ep in episodes:
                on_episode(ep)
        self.last_versions = sorted({results[k][2] for k in results})
        stats = [results[k][1] for k in sorted(results)]
        self.last_stats = RolloutStats(
            episodes=len(episodes), generate_calls=sum(s.generate_calls for s in stats),
            requests=sum(s.requests for s in stats), tokens=sum(s.tokens for s in stats),
            seconds=time.perf_counter() - start,
            generate_seconds=max((s.generate_seconds for s in stats), default=0.0))
        return episodes

    def shutdown(self) -> None:
        self.actors.shutdown()

"""One rollout worker group per base model: the distributed rollouts of a heterogeneous team.

A team whose roles name different bases (``team.roles[].model``) cannot cut a step into shards of
whole episodes the way ``RolloutPool`` does: an episode needs every base, and a worker loads only
one. So here the lock-step ``RolloutRunner`` runs in the driver, and only generation is remote:

- each base that owns an adapter gets a ``WorkerGroup`` of ``distributed.rollout_workers`` Ray
  actors (``RolloutWorker``), each loading that base and that base's adapters only; roles sharing a
  base share its group;
- the runner's backend is the single-process path's ``RoutingBackend`` (the same seam, no second
  router) over one ``GroupBackend`` per base: each generate call of the runner is split by the base
  of each request's adapter, and each base's part is cut into contiguous chunks, one per worker of
  its group, run in parallel and returned in request order;
- weight sync sends each group only its own base's adapters (``AdapterWeights.of(..., adapters)``);
- a worker that dies inside a generate call is replaced by a fresh actor that loads the current
  adapters of its base and re-runs that call's chunk; only the returned generations are used, so
  nothing is counted twice. Each restart is a ``RestartEvent`` with ``base`` set.

Env seeds follow the job index as in ``RolloutRunner.run`` and greedy generation does not depend
on how a batch is cut, so greedy episodes equal the single-process heterogeneous runner's.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from teamplay.agents.backends.base import GenerationBackend
from teamplay.agents.backends.routing import RoutingBackend
from teamplay.agents.roles import Team
from teamplay.config import DEFAULT_MAX_RESTARTS, LoraConfig, WorkerResources
from teamplay.distributed.actors import ActorGroup, OnActors
from teamplay.distributed.rollout import RestartEvent, RolloutWorker, WorkerSpec, spend_restart
from teamplay.distributed.weights import AdapterWeights
from teamplay.records import Episode, Generation, SamplingParams, TurnRequest
from teamplay.training.play.rollout import RolloutJob, RolloutRunner, RolloutStats
from teamplay.training.wiring.backend import mixed_backend
from teamplay.training.wiring.model import lora_settings


def group_spec(spec: WorkerSpec, base: str, adapters: Sequence[str]) -> WorkerSpec:
    """The spec of a worker of ``base``'s group: the model-played roles whose adapter is in
    ``adapters``, that base alone, and no envs (its runner lives in the driver).

    The worker never reads ``model.checkpoint`` (whose folder also holds the other bases'
    adapters): it takes the checkpoint's LoRA shape and gets the adapters by weight sync."""
    lora, _ = lora_settings(spec.model)
    model = spec.model.model_copy(update={"name": base, "checkpoint": None, "lora": LoraConfig(**lora)})
    roles = tuple(r for r in spec.team.roles if not r.scripted and r.adapter_name in adapters)
    return dataclasses.replace(spec, model=model, team=Team(roles=roles), make_envs={})


class WorkerGroup(OnActors):
    """The rollout workers of one base: parallel generate calls, restarts, adapter versions.

    Args:
        base: the base model name.
        spec: ``group_spec`` of that base.
        workers: actors in the group (>= 1).
        resources: Ray resources per actor.
        max_staleness: versions a worker may lag behind the published adapters.
        max_restarts: restarts allowed within one ``BaseGroupsPool.run`` call (all groups together).
        events: the pool's restart log of the current run call (shared by every group).
    """

    def __init__(self, base: str, spec: WorkerSpec, workers: int, resources: WorkerResources,
                 max_staleness: int, max_restarts: int, events: list[RestartEvent]) -> None:
        self.base, self.spec = base, spec
        self.adapters = spec.team.adapter_names()
        self.max_staleness, self.max_restarts, self.events = max_staleness, max_restarts, events
        # a worker loads the first published adapters whatever their version: it never read
        # model.checkpoint, so its own start-up adapters are only the run's fresh ones
        self.actors = ActorGroup(RolloutWorker, lambda k: (spec,), workers, resources, max_staleness,
                                 load_first=True)
        self.sync_bytes = 0  # adapter bytes sent to this group's workers since the pool last reset it
        self.used_versions: set[int] = set()  # adapter versions of the generate calls since then

    def generate(self, requests: Sequence[TurnRequest], sampling: SamplingParams) -> list[Generation]:
        """``requests`` cut into contiguous chunks, one per worker, run in parallel; in request order."""
        min_version = max(0, self.version - self.max_staleness)

        def submit(k: int, worker: Any, lo: int, hi: int) -> Any:
            self.sync_bytes += self.actors.sync(k)
            return worker.generate.remote(list(requests[lo:hi]), sampling, min_version)

        def died(k: int, exc: BaseException, lo: int, hi: int) -> None:
            event = RestartEvent(worker=k, pid=self.pids[k], jobs=hi - lo, error=type(exc).__name__, base=self.base)
            spend_restart(self.events, self.max_restarts, event, exc)

        results, replaced_bytes = self.actors.map_chunks(len(requests), submit, died)
        self.sync_bytes += replaced_bytes
        self.used_versions.update(version for _, version in results.values())
        return [g for k in sorted(results) for g in results[k][0]]

    def shutdown(self) -> None:
        self.actors.shutdown()


class GroupBackend(GenerationBackend):
    """A ``WorkerGroup`` seen as the generation backend of its base (inside a ``RoutingBackend``)."""

    name = "ray-group"

    def __init__(self, group: WorkerGroup) -> None:
        self.group = group

    def adapters(self) -> tuple[str, ...]:
        return self.group.adapters

    def generate(self, requests: Sequence[TurnRequest], sampling: SamplingParams) -> list[Generation]:
        return self.group.generate(requests, sampling)

    def sync_adapters(self) -> None:
        """Nothing to do here: workers load published adapters before their next call."""


class BaseGroupsPool:
    """One ``WorkerGroup`` per base, behind ``RolloutPool``'s interface (``run``, ``publish``,
    ``version``, ``last_stats``, ``last_events``, ``last_versions``, ``sync_bytes``, ``shutdown``).

    Args:
        spec: the run's worker spec (whole team, env factories).
        owner: adapter name -> base model name (``MultiBaseTeamModel.base_of``); a group per base.
        workers: actors per group (``distributed.rollout_workers``).
        resources, sampling, max_staleness, max_restarts: as for ``RolloutPool``.
    """

    def __init__(self, spec: WorkerSpec, owner: Mapping[str, str], workers: int, resources: WorkerResources,
                 sampling: SamplingParams, max_staleness: int = 0,
                 max_restarts: int = DEFAULT_MAX_RESTARTS) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.spec, self.sampling, self.max_staleness = spec, sampling, max_staleness
        self.last_events: list[RestartEvent] = []
        self.groups: dict[str, WorkerGroup] = {}
        try:
            for base in dict.fromkeys(owner.values()):
                adapters = [a for a, b in owner.items() if b == base]
                self.groups[base] = WorkerGroup(base, group_spec(spec, base, adapters), workers, resources,
                                                max_staleness, max_restarts, self.last_events)
        except BaseException:
            self.shutdown()
            raise
        routing = RoutingBackend({b: GroupBackend(g) for b, g in self.groups.items()}, owner)
        self.backend = mixed_backend(routing, spec.team)  # scripted roles play in the driver
        self.latest: AdapterWeights | None = None
        self.last_stats: RolloutStats | None = None
        self.last_versions: list[int] = []
        self.sync_bytes = 0

    def publish(self, weights: AdapterWeights) -> None:
        """Make ``weights`` current; each group gets only its own base's adapters."""
        self.latest = weights
        for group in self.groups.values():
            group.publish(AdapterWeights(version=weights.version,
                                         tensors={a: weights.tensors[a] for a in group.adapters}))

    @property
    def version(self) -> int:
        return self.latest.version if self.latest is not None else 0

    @property
    def pids(self) -> dict[str, list[int]]:
        """Base -> the process ids of its group's workers."""
        return {b: list(g.pids) for b, g in self.groups.items()}

    def run(self, jobs: Sequence[RolloutJob], seed: int = 0,
            on_episode: Callable[[Episode], None] | None = None, env: str = "train",
            sampling: SamplingParams | None = None) -> list[Episode]:
        """Every job run by the driver's lock-step runner on the groups; episodes in job order.

        Each episode's ``metadata["weights_version"]`` is the oldest adapter version any generate
        call of this run used (the published version when ``max_staleness`` is 0)."""
        start = time.perf_counter()
        self.last_events.clear()
        for g in self.groups.values():
            g.sync_bytes, g.used_versions = 0, set()
        runner = RolloutRunner(self.spec.make_envs[env], self.backend, sampling or self.sampling,
                               max_batch=self.spec.max_batch)
        episodes = runner.run(jobs, seed=seed)
        used = sorted(set().union(*(g.used_versions for g in self.groups.values())))
        oldest = used[0] if used else self.version
        episodes = [dataclasses.replace(ep, metadata={**ep.metadata, "weights_version": oldest}) for ep in episodes]
        if on_episode is not None:
            for ep in episodes:
                on_episode(ep)
        self.last_versions = used
        self.sync_bytes = sum(g.sync_bytes for g in self.groups.values())
        stats = runner.last_stats
        assert stats is not None
        self.last_stats = dataclasses.replace(stats, seconds=time.perf_counter() - start)
        return episodes

    def shutdown(self) -> None:
        for g in self.groups.values():
            g.shutdown()
        self.groups = {}

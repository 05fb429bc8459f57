"""One actor-group type for every Ray role: rollout workers, a base's worker group, learner ranks.

``ActorGroup`` starts ``n`` actors of one class, knows their process ids, replaces a dead one by a
fresh actor, runs one call per actor over contiguous chunks of a batch (re-running a dead actor's
chunk on its replacement) and ends them together. A group that serves adapters also keeps, per
actor, the adapter version it holds, and loads the published version lazily before the actor's
next call when it lags more than ``max_staleness`` versions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from teamplay.config import WorkerResources
from teamplay.distributed.cluster import import_ray
from teamplay.distributed.weights import AdapterWeights

#: seconds ``shutdown`` waits for the actors' ``close`` (a vLLM engine stops in a few seconds)
CLOSE_TIMEOUT_S = 30.0


class ActorGroup:
    """``n`` Ray actors of ``cls``; actor ``k`` is built with ``args_of(k)``.

    Args:
        cls: the actor's class (a plain class; made remote here with ``resources``, never restarted
            by Ray: a dead actor is replaced by ``replace``).
        args_of: the constructor arguments of actor ``k``.
        n: how many actors (>= 1).
        resources: Ray resources per actor.
        max_staleness: versions an actor may lag behind the published adapters.
        load_first: load the first published adapters whatever their version (actors that never
            read the run's own adapters at start-up must).
    """

    def __init__(self, cls: type, args_of: Callable[[int], tuple], n: int, resources: WorkerResources,
                 max_staleness: int = 0, load_first: bool = False) -> None:
        if n < 1:
            raise ValueError(f"workers must be >= 1, got {n}")
        self.ray = import_ray()
        self.args_of, self.max_staleness, self.load_first = args_of, max_staleness, load_first
        self._cls = cls
        self._remote = self.ray.remote(num_cpus=resources.num_cpus, num_gpus=resources.num_gpus,
                                       max_restarts=0)(cls)
        self.actors = [self._remote.remote(*args_of(k)) for k in range(n)]
        self.pids: list[int] = self.ray.get([a.pid.remote() for a in self.actors])
        self.versions = [0] * n
        self.loaded = [False] * n
        self.latest: AdapterWeights | None = None
        self._latest_ref = None

    def __len__(self) -> int:
        return len(self.actors)

    # --------------------------------------------------------------------------- weights
    def publish(self, weights: AdapterWeights) -> None:
        """Make ``weights`` the current version; actors load it lazily before their next call."""
        self.latest = weights
        self._latest_ref = self.ray.put(weights)  # one copy in the object store, shared by all actors

    @property
    def version(self) -> int:
        return self.latest.version if self.latest is not None else 0

    def sync(self, k: int, force: bool = False) -> int:
        """Queue a weight load on actor ``k`` (it runs before the actor's next call) when it lags too
        far, holds a newer version than the published one, has loaded nothing yet under
        ``load_first``, or ``force``; returns the bytes sent. (An asynchronous run publishes older
        adapters after newer ones: its generator's snapshot after a held-out evaluation with the
        learner's; and a restored run publishes the checkpoint's version.)"""
        if self.latest is None:
            return 0
        lagging = self.versions[k] < self.version - self.max_staleness
        ahead = self.versions[k] > self.version
        if force or lagging or ahead or (self.load_first and not self.loaded[k]):
            self.actors[k].load_weights.remote(self._latest_ref)
            self.versions[k], self.loaded[k] = self.version, True
            return self.latest.nbytes
        return 0

    # --------------------------------------------------------------------------- calls
    def chunks(self, size: int) -> dict[int, tuple[int, int]]:
        """Contiguous ``[lo, hi)`` chunks of a batch of ``size``, one per actor that gets any."""
        n = len(self.actors)
        bounds = [round(k * size / n) for k in range(n + 1)]
        return {k: (bounds[k], bounds[k + 1]) for k in range(n) if bounds[k + 1] > bounds[k]}

    def map_chunks(self, size: int, submit: Callable[[int, Any, int, int], Any],
                   on_death: Callable[[int, BaseException, int, int], None]) -> tuple[dict[int, Any], int]:
        """Run ``submit(k, actor, lo, hi)`` (returns an object ref) for every chunk of a batch of
        ``size``, in parallel; a chunk whose actor died (``RayActorError``) is reported to
        ``on_death(k, error, lo, hi)`` (which raises to give up), the actor replaced and the chunk
        submitted again. Returns each chunk's result by actor index, and the adapter bytes the
        replacements were loaded with."""
        chunks = self.chunks(size)
        pending = {submit(k, self.actors[k], *chunks[k]): k for k in chunks}
        results: dict[int, Any] = {}
        replaced_bytes = 0
        while pending:
            [ready], _ = self.ray.wait(list(pending), num_returns=1)
            k = pending.pop(ready)
            try:
                results[k] = self.ray.get(ready)
            except self.ray.exceptions.RayActorError as exc:
                on_death(k, exc, *chunks[k])
                replaced_bytes += self.replace(k)
                pending[submit(k, self.actors[k], *chunks[k])] = k
        return results, replaced_bytes

    def replace(self, k: int) -> int:
        """A fresh actor in place of dead actor ``k``, loaded with the current adapters; returns the
        bytes of that load."""
        self.ray.kill(self.actors[k], no_restart=True)
        self.actors[k] = self._remote.remote(*self.args_of(k))
        self.pids[k] = self.ray.get(self.actors[k].pid.remote())
        self.versions[k], self.loaded[k] = 0, False
        return self.sync(k, force=True)

    def shutdown(self, close_timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """End every actor (idempotent). Actors whose class has a ``close`` (rollout workers: their
        backends) are asked to close first, waiting at most ``close_timeout_s`` for all of them
        (a dead or hung actor is killed regardless)."""
        if self.actors and callable(getattr(self._cls, "close", None)):
            closing = [actor.close.remote() for actor in self.actors]
            self.ray.wait(closing, num_returns=len(closing), timeout=close_timeout_s)
        for actor in self.actors:
            self.ray.kill(actor, no_restart=True)
        self.actors = []


class OnActors:
    """What a pool or group built on an ``ActorGroup`` (its ``actors``) shows of it: the workers,
    their process ids, and the adapters published to them."""

    actors: ActorGroup

    @property
    def workers(self) -> list[Any]:
        return self.actors.actors

    @property
    def pids(self) -> list[int]:
        return self.actors.pids

    def publish(self, weights: AdapterWeights) -> None:
        """Make ``weights`` the current version; workers load it lazily before their next call."""
        self.actors.publish(weights)

    @property
    def version(self) -> int:
        return self.actors.version

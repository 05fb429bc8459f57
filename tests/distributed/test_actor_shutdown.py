"""``ActorGroup.shutdown`` asks actors that can close (rollout workers: their backends, e.g. a vLLM
engine whose processes would outlive a killed actor) to close before it kills them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("ray")


class Closing:
    """An actor that leaves a file behind when it is closed."""

    def __init__(self, folder: str, k: int) -> None:
        self.marker = Path(folder) / f"closed-{k}"

    def pid(self) -> int:
        return os.getpid()

    def close(self) -> None:
        self.marker.write_text("closed")


class Plain:
    """An actor without ``close``: shutdown only kills it."""

    def __init__(self, k: int) -> None:
        self.k = k

    def pid(self) -> int:
        return os.getpid()


def test_shutdown_closes_each_actor_then_kills_it(ray_cluster, tmp_path):
    from teamplay.config import WorkerResources
    from teamplay.distributed.actors import ActorGroup

    resources = WorkerResources(num_cpus=1)
    group = ActorGroup(Closing, lambda k: (str(tmp_path), k), 2, resources)
    assert not list(tmp_path.iterdir())
    group.shutdown()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["closed-0", "closed-1"]
    assert group.actors == []
    group.shutdown()  # idempotent
    plain = ActorGroup(Plain, lambda k: (k,), 1, resources)
    plain.shutdown()  # no close to call: killed all the same
    assert plain.actors == []


def test_a_rollout_worker_closes_the_backend_it_built():
    from teamplay.distributed.rollout import RolloutWorker

    class Backend:
        closed = 0

        def close(self) -> None:
            self.closed += 1

    worker = RolloutWorker.__new__(RolloutWorker)  # its __init__ loads a model: not needed here
    worker.backend = Backend()
    worker.close()
    assert worker.backend.closed == 1

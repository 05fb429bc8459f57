"""Asynchronous rollouts on the Ray pool (``rollout.max_staleness`` with ``distributed:``): the
generator thread of ``teamplay.training.run.asynchronous.rollouts`` drives the rollout workers while the
learner group updates.

``PoolGeneration`` is that run's ``AheadGeneration``. A snapshot's weights are the learner's published
``AdapterWeights`` (``DriverLearner.published``: versioned, adapter-only, never changed after), so
the workers' versions mean what they mean in a synchronous run, and at ``max_staleness: 0`` they
load exactly what a synchronous run's workers load, when they load it.

Only the generator thread calls into the pool while it runs. The pool keeps per-worker
bookkeeping in the driver (the adapter version each worker holds, the latest published weights,
restarts, the last run's stats) that one ``run`` reads and writes from its publish to its
return; a second thread publishing or running in between would make a batch's shards use
different adapters, or a worker load weights the bookkeeping does not record. So in an
asynchronous run the learner never publishes to the pool (``DriverLearner`` only keeps
``published``), and every pool run, training batch or held-out evaluation, publishes the
adapters it must use right before it runs, on the generator thread (held-out evaluations reach
it through ``AsyncRollouts.call``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from teamplay.distributed.weights import AdapterWeights
from teamplay.records import Episode, SamplingParams
from teamplay.training.play.rollout import RolloutJob
from teamplay.training.run.asynchronous.rollouts import Snapshot


class PoolGeneration:
    """The generator's side of an asynchronous run on a Ray pool (see the module).

    Args:
        runner: the run's ``PoolRunner`` (its pool, and the step metrics of its last run).
        learner: the run's ``DriverLearner`` (its ``published`` adapters).
    """

    #: the pool is the generator thread's: held-out evaluations run there
    evaluates_here = True

    def __init__(self, runner, learner) -> None:
        self.pool_runner, self.learner = runner, learner
        #: the loaded snapshot's weights, which the training batches use (set and read on the generator thread)
        self.loaded: AdapterWeights | None = None

    def weights(self) -> AdapterWeights:
        if self.learner.published is None:
            raise RuntimeError("the learner has published no adapters yet (share_state runs before the first step)")
        return self.learner.published

    def runner(self, before_generate: Callable[[], None]) -> _TrainingBatches:
        # the pool has no safe point inside a run: a stop waits for the batch in flight
        return _TrainingBatches(self)

    def load(self, snapshot: Snapshot) -> None:
        self.loaded = snapshot.weights

    def batch_metrics(self) -> dict[str, Any]:
        return self.pool_runner.step_metrics()

    def step_metrics(self, runner_metrics: Mapping[str, Any]) -> dict[str, Any]:
        """The batch's pool metrics, with ``weights_version`` the learner's published version after
        the update (in a synchronous step the pool's, published by the update)."""
        return {**runner_metrics, "weights_version": self.weights().version}

    def held_out(self, runner, sampling: SamplingParams, before_generate: Callable[[], None] | None) -> _HeldOut:
        return _HeldOut(self, sampling)

    def close(self) -> None:
        """Nothing of its own: the pool is the runner's to shut down."""

    def run_with(self, weights: AdapterWeights, jobs: Sequence[RolloutJob], seed: int, **kwargs: Any) -> list[Episode]:
        """Publish ``weights`` and run ``jobs`` on the pool (the generator thread's, see the module):
        each worker loads them first unless it holds that version already."""
        pool = self.pool_runner.pool
        pool.publish(weights)
        return pool.run(jobs, seed=seed, **kwargs)


class _TrainingBatches:
    """The training batches: the loaded snapshot's adapters, the training envs and decoding."""

    def __init__(self, generation: PoolGeneration) -> None:
        self.generation = generation

    def run(self, jobs: Sequence[RolloutJob], seed: int = 0) -> list[Episode]:
        weights = self.generation.loaded
        if weights is None:
            raise RuntimeError("no snapshot loaded before the first batch")
        return self.generation.run_with(weights, jobs, seed)


class _HeldOut:
    """Held-out episodes: the learner's adapters now, the evaluation envs and decoding."""

    def __init__(self, generation: PoolGeneration, sampling: SamplingParams) -> None:
        self.generation, self.sampling = generation, sampling

    def run(self, jobs: Sequence[RolloutJob], seed: int = 0,
            on_episode: Callable[[Episode], None] | None = None) -> list[Episode]:
        return self.generation.run_with(self.generation.weights(), jobs, seed, on_episode=on_episode, env="eval",
                                        sampling=self.sampling)

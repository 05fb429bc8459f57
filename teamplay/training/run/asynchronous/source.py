"""The rollout source of an asynchronous run (``rollout.max_staleness``; ``AsyncSource``): the
step's batch comes from the generator thread, groups too stale to train on are dropped, and the
adapter versions move with each update.

``AsyncSource`` is the asynchronous ``teamplay.training.run.rollout_source.RolloutSource``: ``take``
the step's batch from the generator (``rollouts.AsyncRollouts``, started on the first step after a
start or a restore), ``keep`` its groups within the staleness bound, ``updated`` after the learner's
update (the adapter versions move, the new snapshot goes to the generator), ``metrics`` for the
step's line. The adapter versions live in the run's ``extra_state`` (``"adapter_versions"``) so that
a checkpoint carries them and a resumed run measures staleness from where it stopped.

What the generator generates with is the run's ``AheadGeneration`` (``rollouts.AheadGeneration``),
which the runner builds (``Runner.generation``): a copy of the adapters in one process, the Ray pool
on a cluster. Where only the generator thread may use the engine or pool (vllm, Ray), the held-out
evaluations go through it too (``evaluation_runner``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from typing import Any, Protocol, TypeVar

from teamplay.records import Episode, SamplingParams, TaskItem
from teamplay.training.play.rollout import RolloutJob
from teamplay.training.run.asynchronous.rollouts import (
    AheadGeneration,
    AsyncRollouts,
    RolloutBatch,
    Snapshot,
    split_stale,
)
from teamplay.training.run.parts import EpisodeSource, Runner
from teamplay.training.step.stages import GroupWork
from teamplay.training.store.checkpoint import TrainerState

#: the ``extra_state`` key of the adapter versions (adapter -> steps that changed it)
VERSIONS = "adapter_versions"

T = TypeVar("T")


class RunPosition(Protocol):
    """What the source reads and moves of the run's state (``teamplay.training.run.run_state.RunState``):
    the steps done and data position (``state``), the JSON saved with checkpoints (``extra_state``),
    and the next problems of the data order (``next_problems``, which moves the position)."""

    state: TrainerState
    extra_state: dict[str, Any]

    def next_problems(self, items: Sequence[TaskItem], n: int) -> list[TaskItem]: ...


class AsyncSource:
    """Asynchronous rollouts of a run (see the module): ``generation`` what the generator generates
    with (``Runner.generation``), ``runner`` the run's runner (its held-out episodes),
    ``adapter_names`` the team's adapters, ``run_state`` the run's state; ``seed``,
    ``max_staleness``, ``problems_per_step``, ``group_size`` and ``steps`` the run's.

    ``lead``: how many steps ahead the generator may begin a batch; the run's ``max_staleness``, so
    that nothing is generated only to be dropped. Setting it higher (before the first step) lets
    groups fall behind the bound and shows the drop path.
    """

    def __init__(self, generation: AheadGeneration, runner: Runner, adapter_names: Sequence[str],
                 run_state: RunPosition, seed: int, max_staleness: int, problems_per_step: int, group_size: int,
                 steps: int) -> None:
        self.max_staleness = max_staleness
        self.lead = max_staleness
        self.generation, self.runner, self.run_state = generation, runner, run_state
        self.adapter_names = tuple(adapter_names)
        self.seed, self.problems_per_step, self.group_size, self.steps = seed, problems_per_step, group_size, steps
        self._rollouts: AsyncRollouts | None = None
        #: the learner's busy intervals (``perf_counter`` pairs: from taking a batch to publishing the
        #: update), beside the generator's ``AsyncRollouts.busy``
        self.learner_busy: list[tuple[float, float]] = []
        # the step in progress: its batch, the learner's wait for it, and its groups' lags
        self._batch: RolloutBatch | None = None
        self._waited = 0.0
        self._lags: list[int] = []
        self._taken = 0.0

    @property
    def generator_busy(self) -> list[tuple[float, float]]:
        return self._rollouts.busy if self._rollouts is not None else []

    # --------------------------------------------------------------- versions
    def versions(self) -> dict[str, int]:
        """Adapter -> its version now (every adapter of the team; 0 before its first update)."""
        stored = self.run_state.extra_state.get(VERSIONS, {})
        return {a: int(stored.get(a, 0)) for a in self.adapter_names}

    def snapshot(self) -> Snapshot:
        """The learner's adapters now, for the generator."""
        return Snapshot(self.run_state.state.step, self.versions(), self.generation.weights())

    # --------------------------------------------------------------- a step
    def take(self, step: int, items: Sequence[TaskItem]) -> tuple[list[TaskItem], list[Episode]]:
        """Step ``step``'s problems (the run's data position moves past them: trained or dropped,
        they are consumed) and its batch's episodes, generated ahead by the same jobs and seeds as a
        synchronous step, with the newest adapters within the bound; the learner's wait is timed."""
        if self._rollouts is None:
            self._rollouts = AsyncRollouts(self.generation, self.lead, items, self.seed, self.problems_per_step,
                                           self.group_size, self.steps)
        if not self._rollouts.running:
            self._rollouts.start(self.run_state.state, self.snapshot())
        start = time.perf_counter()
        batch = self._rollouts.take(step)
        self._waited = time.perf_counter() - start
        problems = self.run_state.next_problems(items, self.problems_per_step)
        if [p.id for p in problems] != [p.id for p in batch.problems]:
            raise RuntimeError(f"step {step}: the generator's problems are not the data order's")
        self._batch, self._taken = batch, time.perf_counter()
        return problems, list(batch.episodes)

    def keep(self, groups: Sequence[GroupWork], active: Collection[str]) -> tuple[list[GroupWork], list[GroupWork]]:
        """``(kept, dropped)``: the step's groups within ``max_staleness`` versions for the ``active``
        adapters it trains, and those beyond (``rollouts.split_stale``)."""
        assert self._batch is not None, "keep() before take()"
        kept, dropped, self._lags = split_stale(groups, self._batch.versions, self.versions(), active,
                                                self.max_staleness)
        return kept, dropped

    def runner_metrics(self) -> dict[str, Any]:
        """What the runner adds to the step's line (``Runner.step_metrics`` of a synchronous step),
        from the batch's generation (taken by the generator thread: it alone uses a pool) and, after
        the update, the learner's side."""
        assert self._batch is not None, "runner_metrics() before take()"
        return self.generation.step_metrics(self._batch.runner_metrics)

    def updated(self, active: Collection[str], optimizer_steps: int) -> None:
        """After the update (the run's step already counted): an active adapter that took an
        optimiser step is one version newer; the generator gets the new snapshot."""
        versions = self.versions()
        if optimizer_steps:
            for a in active:
                versions[a] += 1
        self.run_state.extra_state[VERSIONS] = versions
        snapshot = self.snapshot()
        # the learner's interval ends before the generator can wake to the new snapshot
        self.learner_busy.append((self._taken, time.perf_counter()))
        if self._rollouts is not None:
            self._rollouts.publish(snapshot)

    def metrics(self, kept: Sequence[GroupWork], dropped: Sequence[GroupWork]) -> dict[str, Any]:
        """What the step's metrics line adds: the staleness of the groups trained on and the
        stale ones dropped, the data-order ledger (``problem_ids`` trained on, ``stale_problem_ids``
        dropped, in order), the learner's wait and the batch's generation time."""
        assert self._batch is not None, "metrics() before take()"
        batch = self._batch
        within = [lag for lag in self._lags if lag <= self.max_staleness]
        return {"rollout_staleness": max(within, default=0), "stale_groups_dropped": len(dropped),
                "problem_ids": [g.item.id for g in kept], "stale_problem_ids": [g.item.id for g in dropped],
                "rollout_wait_seconds": self._waited, "rollout_generate_seconds": batch.ended - batch.started,
                "rollout_snapshot_step": batch.snapshot_step}

    def close(self) -> None:
        """Stop the generator (idempotent); the next ``take`` starts it again from the run's state."""
        if self._rollouts is not None:
            self._rollouts.close()

    def free(self) -> None:
        """Stop the generator and free what its generation built (the trainer's ``close``)."""
        self.close()
        self.generation.close()

    # --------------------------------------------------------------- the engine's thread
    def call(self, fn: Callable[[], T]) -> T:
        """``fn()`` on the generator thread while it runs (``AsyncRollouts.call``), else here."""
        if self._rollouts is None:
            return fn()
        return self._rollouts.call(fn)

    def evaluation_runner(self) -> Runner:
        """The runner the held-out evaluations use: the run's runner itself, or where only the
        generator thread may use the engine or pool (``AheadGeneration.evaluates_here``), one whose
        held-out episodes are generated on that thread (the learner waits for them, as it would anyway)."""
        return _OnGeneratorThread(self.runner, self) if self.generation.evaluates_here else self.runner


class _OnGeneratorThread:
    """A ``Runner`` whose held-out sources generate on the generator thread (``AsyncSource.call``,
    with the learner's adapters: ``AheadGeneration.held_out``); the rest is ``runner``'s."""

    def __init__(self, runner: Runner, source: AsyncSource) -> None:
        self.runner, self.source = runner, source

    def held_out(self, sampling: SamplingParams, before_generate: Callable[[], None] | None) -> EpisodeSource:
        held_out = self.source.generation.held_out(self.runner, sampling, before_generate)
        return _HeldOutOnGeneratorThread(held_out, self.source)

    def run(self, jobs: Sequence[RolloutJob], seed: int = 0,
            on_episode: Callable[[Episode], None] | None = None) -> list[Episode]:
        return self.runner.run(jobs, seed=seed, on_episode=on_episode)

    def step_metrics(self) -> dict[str, Any]:
        return self.runner.step_metrics()

    def generation(self, run: Any, learner: Any) -> AheadGeneration:
        return self.runner.generation(run, learner)

    def close(self) -> None:
        self.runner.close()


class _HeldOutOnGeneratorThread:
    """A held-out source whose ``run`` runs on the generator thread."""

    def __init__(self, held_out: EpisodeSource, source: AsyncSource) -> None:
        self.held_out, self.source = held_out, source

    def run(self, jobs: Sequence[RolloutJob], seed: int = 0,
            on_episode: Callable[[Episode], None] | None = None) -> list[Episode]:
        return self.source.call(lambda: self.held_out.run(jobs, seed=seed, on_episode=on_episode))

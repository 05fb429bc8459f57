"""The trainer's side of asynchronous rollouts (``rollout.max_staleness``): where a step's
rollouts come from, which of its groups are too stale to train on, and the adapter versions.

``AsyncStep`` is what ``Trainer.step`` holds instead of calling the runner itself: ``take`` the
step's batch from the generator (``async_rollouts.AsyncRollouts``, started on the first step after
a start or a restore), ``split`` its groups by staleness, ``updated`` after the learner's update
(the adapter versions move, the new snapshot goes to the generator), ``metrics`` for the step's
line. The adapter versions live in the run's ``extra_state`` (``"adapter_versions"``) so that a
checkpoint carries them and a resumed run measures staleness from where it stopped.

What the generator generates with is the run's ``Generation`` (``async_rollouts.Generation``), which
the runner builds (``Runner.generation``): a copy of the adapters in one process, the Ray pool on a
cluster. Where only the generator thread may use the engine or pool (vllm, Ray), the held-out
evaluations go through it too (``evaluation_runner``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from typing import Any, TypeVar

from teamplay.errors import ConfigError
from teamplay.records import Episode, SamplingParams, TaskItem
from teamplay.training.learn.update import old_logprob_source
from teamplay.training.play.rollout import RolloutJob
from teamplay.training.run.async_rollouts import AsyncRollouts, Generation, RolloutBatch, Snapshot, split_stale
from teamplay.training.run.parts import EpisodeSource, Runner
from teamplay.training.run.run_state import RunState
from teamplay.training.step.stages import GroupWork

#: the ``extra_state`` key of the adapter versions (adapter -> steps that changed it)
VERSIONS = "adapter_versions"

T = TypeVar("T")


class AsyncStep:
    """Asynchronous rollouts of a run (see the module): ``cfg`` the run's config, ``generation`` what
    the generator generates with (``Runner.generation``), ``team_model`` the learner's team model,
    ``run_state`` the run's state.

    ``lead``: how many steps ahead the generator may begin a batch; the run's ``max_staleness``, so
    that nothing is generated only to be dropped. Setting it higher (before the first step) lets
    groups fall behind the bound and shows the drop path.
    """

    def __init__(self, cfg, generation: Generation, team_model, run_state: RunState) -> None:
        if cfg.rollout.max_staleness > 0 and old_logprob_source(cfg, team_model) != "generation":
            raise ConfigError("objective.old_logprobs: auto resolves to trainer for this model (half precision), "
                              "which would leave stale rollouts uncorrected; with rollout.max_staleness > 0 set "
                              "objective.old_logprobs: generation (or model.dtype: float32)")
        self.max_staleness: int = cfg.rollout.max_staleness
        self.lead = self.max_staleness
        self.cfg, self.generation, self.run_state = cfg, generation, run_state
        self.team_model = team_model
        self._rollouts: AsyncRollouts | None = None
        #: the learner's busy intervals (``perf_counter`` pairs: from taking a batch to publishing the
        #: update), beside the generator's ``AsyncRollouts.busy``
        self.learner_busy: list[tuple[float, float]] = []

    @property
    def generator_busy(self) -> list[tuple[float, float]]:
        return self._rollouts.busy if self._rollouts is not None else []

    # --------------------------------------------------------------- versions
    def versions(self) -> dict[str, int]:
        """Adapter -> its version now (every adapter of the team; 0 before its first update)."""
        stored = self.run_state.extra_state.get(VERSIONS, {})
        return {a: int(stored.get(a, 0)) for a in self.team_model.adapter_names}

    def snapshot(self) -> Snapshot:
        """The learner's adapters now, for the generator."""
        step = self.run_state.state.step
        return Snapshot(step, self.versions(), self.generation.weights())

    # --------------------------------------------------------------- a step
    def take(self, step: int, items: Sequence[TaskItem]) -> tuple[list[TaskItem], RolloutBatch, float]:
        """Step ``step``'s problems (the run's data position moves past them: trained or dropped,
        they are consumed) and its batch, with the seconds the learner waited for it."""
        if self._rollouts is None:
            self._rollouts = self._build(items)
        if not self._rollouts.running:
            self._rollouts.start(self.run_state.state, self.snapshot())
        start = time.perf_counter()
        batch = self._rollouts.take(step)
        waited = time.perf_counter() - start
        problems = self.run_state.next_problems(items, self.cfg.rollout.problems_per_step)
        if [p.id for p in problems] != [p.id for p in batch.problems]:
            raise RuntimeError(f"step {step}: the generator's problems are not the data order's")
        self._taken = time.perf_counter()
        return problems, batch, waited

    def split(self, groups: Sequence[GroupWork], batch: RolloutBatch,
              active: Collection[str]) -> tuple[list[GroupWork], list[GroupWork], list[int]]:
        """``(fresh, stale, lags)`` of the step's groups, for the ``active`` adapters it trains
        (``async_rollouts.split_stale``)."""
        return split_stale(groups, batch.versions, self.versions(), active, self.max_staleness)

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

    def runner_metrics(self, batch: RolloutBatch) -> dict[str, Any]:
        """What the runner adds to the step's line (``Runner.step_metrics`` of a synchronous step),
        from the batch's generation and, after the update, the learner's side."""
        return self.generation.step_metrics(batch.runner_metrics)

    def metrics(self, batch: RolloutBatch, waited: float, fresh: Sequence[GroupWork], stale: Sequence[GroupWork],
                lags: Sequence[int]) -> dict[str, Any]:
        """What the step's metrics line adds: the staleness of the groups trained on and the
        stale ones dropped, the data-order ledger (``problem_ids`` trained on, ``stale_problem_ids``
        dropped, in order), the learner's wait and the batch's generation time."""
        kept = [lag for lag in lags if lag <= self.max_staleness]
        return {"rollout_staleness": max(kept, default=0), "stale_groups_dropped": len(stale),
                "problem_ids": [g.item.id for g in fresh], "stale_problem_ids": [g.item.id for g in stale],
                "rollout_wait_seconds": waited, "rollout_generate_seconds": batch.ended - batch.started,
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

    def evaluation_runner(self, runner: Runner) -> Runner:
        """The runner the held-out evaluations use: ``runner`` itself, or where only the generator
        thread may use the engine or pool (``Generation.evaluates_here``), one whose held-out
        episodes are generated on that thread (the learner waits for them, as it would anyway)."""
        return _OnGeneratorThread(runner, self) if self.generation.evaluates_here else runner

    # --------------------------------------------------------------- the generator
    def _build(self, items: Sequence[TaskItem]) -> AsyncRollouts:
        return AsyncRollouts(self.generation, self.lead, items, self.cfg.seed, self.cfg.rollout.problems_per_step,
                             self.cfg.rollout.group_size, self.cfg.steps)


class _OnGeneratorThread:
    """A ``Runner`` whose held-out sources generate on the generator thread (``AsyncStep.call``,
    with the learner's adapters: ``Generation.held_out``); the rest is ``runner``'s."""

    def __init__(self, runner: Runner, async_step: AsyncStep) -> None:
        self.runner, self.async_step = runner, async_step

    def held_out(self, sampling: SamplingParams, before_generate: Callable[[], None] | None) -> EpisodeSource:
        source = self.async_step.generation.held_out(self.runner, sampling, before_generate)
        return _HeldOutOnGeneratorThread(source, self.async_step)

    def run(self, jobs: Sequence[RolloutJob], seed: int = 0,
            on_episode: Callable[[Episode], None] | None = None) -> list[Episode]:
        return self.runner.run(jobs, seed=seed, on_episode=on_episode)

    def step_metrics(self) -> dict[str, Any]:
        return self.runner.step_metrics()

    def generation(self, run: Any, learner: Any) -> Generation:
        return self.runner.generation(run, learner)

    def close(self) -> None:
        self.runner.close()


class _HeldOutOnGeneratorThread:
    """A held-out source whose ``run`` runs on the generator thread."""

    def __init__(self, source: EpisodeSource, async_step: AsyncStep) -> None:
        self.source, self.async_step = source, async_step

    def run(self, jobs: Sequence[RolloutJob], seed: int = 0,
            on_episode: Callable[[Episode], None] | None = None) -> list[Episode]:
        return self.async_step.call(lambda: self.source.run(jobs, seed=seed, on_episode=on_episode))

"""The trainer's side of asynchronous rollouts (``rollout.max_staleness``): where a step's
rollouts come from, which of its groups are too stale to train on, and the adapter versions.

``AsyncStep`` is what ``Trainer.step`` holds instead of calling the runner itself: ``take`` the
step's batch from the generator (``async_rollouts.AsyncRollouts``, started on the first step after
a start or a restore), ``split`` its groups by staleness, ``updated`` after the learner's update
(the adapter versions move, the new snapshot goes to the generator), ``metrics`` for the step's
line. The adapter versions live in the run's ``extra_state`` (``"adapter_versions"``) so that a
checkpoint carries them and a resumed run measures staleness from where it stopped.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from typing import Any

from teamplay.agents.backends.hf import HFBackend
from teamplay.errors import ConfigError
from teamplay.records import TaskItem
from teamplay.training.learn.update import old_logprob_source
from teamplay.training.play.rollout import RolloutRunner
from teamplay.training.run.async_rollouts import (
    AdapterTensors,
    AsyncRollouts,
    RolloutBatch,
    Snapshot,
    generation_copy,
    split_stale,
)
from teamplay.training.run.run_state import RunState
from teamplay.training.step.stages import GroupWork

#: the ``extra_state`` key of the adapter versions (adapter -> steps that changed it)
VERSIONS = "adapter_versions"


class AsyncStep:
    """Asynchronous rollouts of a run (see the module): ``cfg`` the run's config, ``run`` its wiring
    (``wiring.wired_run.WiredRun``: training envs, backend, decoding), ``run_state`` its state.

    ``lead``: how many steps ahead the generator may begin a batch; the run's ``max_staleness``, so
    that nothing is generated only to be dropped. Setting it higher (before the first step) lets
    groups fall behind the bound and shows the drop path.
    """

    def __init__(self, cfg, run, run_state: RunState) -> None:
        if not isinstance(run.backend, HFBackend) or hasattr(run.team_model, "part"):
            raise ConfigError("rollout.max_staleness: asynchronous rollouts need the hf backend over one base "
                              "model (the generator generates with its own copy of the adapters)")
        if cfg.rollout.max_staleness > 0 and old_logprob_source(cfg, run.team_model) != "generation":
            raise ConfigError("objective.old_logprobs: auto resolves to trainer for this model (half precision), "
                              "which would leave stale rollouts uncorrected; with rollout.max_staleness > 0 set "
                              "objective.old_logprobs: generation (or model.dtype: float32)")
        self.max_staleness: int = cfg.rollout.max_staleness
        self.lead = self.max_staleness
        self.cfg, self.run, self.run_state = cfg, run, run_state
        self.team_model = run.team_model
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
        return Snapshot(step, self.versions(), AdapterTensors.of(self.team_model))

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

    # --------------------------------------------------------------- the generator
    def _build(self, items: Sequence[TaskItem]) -> AsyncRollouts:
        copy_model = generation_copy(self.team_model)
        backend = self.run.backend.for_model(copy_model)

        def make_runner(before_generate) -> RolloutRunner:
            return RolloutRunner(self.run.make_env, backend, self.run.sampling, max_batch=self.cfg.backend.max_batch,
                                 before_generate=before_generate)

        return AsyncRollouts(make_runner, lambda weights: weights.apply(copy_model), self.lead, items,
                             self.cfg.seed, self.cfg.rollout.problems_per_step, self.cfg.rollout.group_size,
                             self.cfg.steps)


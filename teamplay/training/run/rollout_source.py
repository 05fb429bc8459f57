"""Where a step's episodes come from: one interface (``RolloutSource``) with a synchronous
implementation (``SyncSource``: the runner generates the step's episodes when the step asks) and
an asynchronous one (``asynchronous.source.AsyncSource``: a generator thread made them ahead), so
``Trainer.step`` runs one code path whichever it holds. ``rollout_source`` picks one, the one place
that does (``wiring.checks.asynchronous`` says which).

Both draw a step's problems from the run's data order and seed its episodes with
``data_order.step_seed``, so at ``max_staleness: 0`` the two give the same episodes.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any, Protocol

from teamplay.config import RolloutConfig
from teamplay.records import Episode, TaskItem
from teamplay.training.play.rollout import step_jobs
from teamplay.training.run.asynchronous.source import AsyncSource
from teamplay.training.run.data_order import step_seed
from teamplay.training.run.parts import Learner, Runner
from teamplay.training.run.run_state import RunState
from teamplay.training.step.stages import GroupWork
from teamplay.training.wiring.checks import asynchronous
from teamplay.training.wiring.wired_run import WiredRun


class RolloutSource(Protocol):
    """What a training step takes its episodes from, in the order the step calls it:

    ``take(step, items)``: step ``step``'s problems (the run's data position moves past them) and
    their ``G`` episodes each, in job order; ``keep(groups, active)``: ``(kept, dropped)``, the
    step's groups it may train on for the ``active`` adapters and those it may not (too stale);
    ``runner_metrics()``: what the runner adds to the step's line; ``updated(active,
    optimizer_steps)``: hears of the step's update (the run's step already counted); ``metrics(kept,
    dropped)``: what the source adds to the step's line. Beside the steps: ``evaluation_runner()``,
    the runner the held-out evaluations use; ``close()`` stops what generates ahead (before a
    restore: it belongs to the state left behind; idempotent); ``free()`` also frees what it built
    (the trainer's ``close``).
    """

    def take(self, step: int, items: Sequence[TaskItem]) -> tuple[list[TaskItem], list[Episode]]: ...

    def keep(self, groups: Sequence[GroupWork],
             active: Collection[str]) -> tuple[list[GroupWork], list[GroupWork]]: ...

    def runner_metrics(self) -> dict[str, Any]: ...

    def updated(self, active: Collection[str], optimizer_steps: int) -> None: ...

    def metrics(self, kept: Sequence[GroupWork], dropped: Sequence[GroupWork]) -> dict[str, Any]: ...

    def evaluation_runner(self) -> Runner: ...

    def close(self) -> None: ...

    def free(self) -> None: ...


class SyncSource:
    """The synchronous ``RolloutSource``: ``runner`` generates step ``k``'s episodes when the step
    asks, ``group_size`` sampled episodes per problem, seeded ``step_seed(seed, k)``; every group is
    kept, nothing is generated ahead (``updated``, ``close`` and ``free`` do nothing, ``metrics`` is
    empty)."""

    def __init__(self, runner: Runner, run_state: RunState, seed: int, problems_per_step: int,
                 group_size: int) -> None:
        self.runner, self.run_state = runner, run_state
        self.seed, self.problems_per_step, self.group_size = seed, problems_per_step, group_size

    def take(self, step: int, items: Sequence[TaskItem]) -> tuple[list[TaskItem], list[Episode]]:
        problems = self.run_state.next_problems(items, self.problems_per_step)
        return problems, self.runner.run(step_jobs(problems, step, self.group_size), seed=step_seed(self.seed, step))

    def keep(self, groups: Sequence[GroupWork], active: Collection[str]) -> tuple[list[GroupWork], list[GroupWork]]:
        return list(groups), []

    def runner_metrics(self) -> dict[str, Any]:
        return self.runner.step_metrics()

    def updated(self, active: Collection[str], optimizer_steps: int) -> None:
        """Nothing generates ahead: the next step's episodes use the updated adapters anyway."""

    def metrics(self, kept: Sequence[GroupWork], dropped: Sequence[GroupWork]) -> dict[str, Any]:
        return {}

    def evaluation_runner(self) -> Runner:
        return self.runner

    def close(self) -> None:
        """Nothing runs ahead."""

    def free(self) -> None:
        """Nothing of its own to free (the runner is the trainer's to close)."""


def rollout_source(rollout: RolloutConfig, seed: int, steps: int, run: WiredRun, runner: Runner, learner: Learner,
                   run_state: RunState) -> RolloutSource:
    """The run's rollout source: asynchronous with ``rollout.max_staleness`` set
    (``wiring.checks.asynchronous``: the generator generates with the runner's
    ``Runner.generation(run, learner)``), else synchronous over ``runner``; ``seed`` and ``steps``
    the run's."""
    if not asynchronous(rollout):
        return SyncSource(runner, run_state, seed, rollout.problems_per_step, rollout.group_size)
    assert rollout.max_staleness is not None
    return AsyncSource(runner.generation(run, learner), runner, run.team_model.adapter_names, run_state, seed,
                       rollout.max_staleness, rollout.problems_per_step, rollout.group_size, steps)

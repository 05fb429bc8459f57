"""What a run carries from step to step and into its checkpoints, kept by one part: ``RunState``.

A paused or preempted run resumes to the metrics lines and adapters of one straight run because
everything below is saved with each checkpoint and restored from it:

* ``state`` (``checkpoint.TrainerState``): the steps done, the tokens generated and the position in
  the data order (``teamplay.training.run.data_order``). The trainer draws each step's problems through
  ``next_problems`` and counts the step with ``end_step``; only ``restore`` sets it otherwise.
* ``extra_state``: JSON that joins each checkpoint's ``extra_state.json``: the speak/skip controller
  tables (``"controllers"``, taken at each save, restored exactly), the curriculum's stage and
  values (``"curriculum"``, likewise: ``teamplay.training.run.curriculum``) and a step whose held-out
  evaluation a preemption abandoned (``preemption.UNLOGGED_STEP``: its metrics and episode lines,
  not yet in the logs; ``unlogged_on_stop`` puts it there, the resumed run ``take_unlogged``s it and
  evaluates and logs it first).
* ``extra_tensors``: named tensors saved with every checkpoint (``save(tensors=...)``: a federated
  site's error-feedback residual) and restored with it; a caller reads them in the trainer's
  ``on_start`` after a resume.

The team model's adapters, the learner's optimiser and schedule and the global RNG states travel
with the checkpoint too (``checkpoint.save_checkpoint``), but they live where they are used.

Two flags say how far the copies agree: whether the learner's copies (a cluster's ranks and rollout
workers) hold the trainer's adapters and optimiser state (``share`` sends them before the first step
or evaluation and again after a restore; in-process nothing moves), and which step the checkpoint
written or restored last holds (a preempted run writes one only when it is behind: ``preempted``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from teamplay.errors import ConfigError
from teamplay.records import TaskItem
from teamplay.training.learn.nonfinite import check_finite_adapters
from teamplay.training.play.controllers import TeamControllers
from teamplay.training.run.curriculum import Curriculum
from teamplay.training.run.data_order import data_order, first_state, next_problems
from teamplay.training.run.parts import Learner
from teamplay.training.run.preemption import UNLOGGED_STEP, Preempted, Preemption, StopRequested
from teamplay.training.store.checkpoint import (
    CheckpointError,
    LoadedCheckpoint,
    TrainerState,
    checkpoint_dir,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from teamplay.training.store.record import RunRecord
from teamplay.training.store.resume import checkpoint_to_resume


class RunState:
    """The state of one run and its checkpoints (see the module): ``record`` is what its files record
    (its folder, its config as JSON), ``seed`` orders its data, and it is finished after ``steps``
    steps or ``token_budget`` generated tokens (None: no budget). ``team_model`` holds the adapters,
    ``learner`` the optimiser and schedule, ``controllers`` the speak/skip tables (or None),
    ``curriculum`` the difficulty stage (or None). A fresh run starts at step 0, at the start of a
    pass over ``size`` training problems.
    """

    def __init__(self, record: RunRecord, seed: int, steps: int, token_budget: int | None, team_model,
                 learner: Learner, controllers: TeamControllers | None, size: int,
                 curriculum: Curriculum | None = None) -> None:
        self.record, self.run_dir = record, record.folder
        self.seed, self.steps, self.token_budget = seed, steps, token_budget
        self.team_model, self.learner, self.controllers = team_model, learner, controllers
        self.curriculum = curriculum
        self.state: TrainerState = first_state(seed, size)
        self.extra_state: dict[str, Any] = {}
        self.extra_tensors: dict[str, torch.Tensor] = {}
        self._saved_step: int | None = None  # the step of the checkpoint written or restored last
        self._shared = False  # whether the learner's copies hold the trainer's adapters and optimiser state

    # ----------------------------------------------------------------- the run's position
    @property
    def finished(self) -> bool:
        """True once ``steps`` steps ran or the generated tokens reached ``token_budget``."""
        budget = self.token_budget
        return self.state.step >= self.steps or (budget is not None and self.state.generated_tokens >= budget)

    def next_problems(self, items: Sequence[TaskItem], n: int) -> list[TaskItem]:
        """The next ``n`` of ``items`` in the run's data order; the position moves past them at once
        (before the step that uses them runs)."""
        problems, self.state = next_problems(self.state, items, self.seed, n)
        return problems

    def new_pass(self, size: int) -> None:
        """Start a pass over ``size`` new training problems (a curriculum stage's items), at the step
        and token count the run has reached."""
        self.state = dataclasses.replace(self.state, data_order=data_order(self.seed, size, 0), data_cursor=0,
                                         data_epoch=0)

    def end_step(self, generated: int) -> int:
        """Count a finished step that generated ``generated`` tokens; returns the run's token total."""
        spent = self.state.generated_tokens + generated
        self.state = dataclasses.replace(self.state, step=self.state.step + 1, generated_tokens=spent)
        return spent

    # ------------------------------------------------------- a step preempted in its evaluation
    @contextmanager
    def unlogged_on_stop(self, step: int, metrics: dict[str, Any], episodes: list[dict[str, Any]]) -> Iterator[None]:
        """Around step ``step``'s held-out evaluation: one abandoned for a preemption
        (``StopRequested``, re-raised) leaves the step unlogged: its lines wait in ``extra_state``
        (saved with the checkpoint) and the global RNG goes back to its state of before the
        evaluation, so the resumed run evaluates and logs the step as this run would have."""
        rng = rng_state()
        try:
            yield
        except StopRequested:
            set_rng_state(rng)
            self.extra_state[UNLOGGED_STEP] = json.loads(json.dumps(
                {"step": step, "metrics": metrics, "episodes": episodes}, default=float))
            raise

    def take_unlogged(self) -> dict[str, Any] | None:
        """The step a preemption left unlogged (``{"step", "metrics", "episodes"}``), removed from
        ``extra_state``; None when there is none."""
        return self.extra_state.pop(UNLOGGED_STEP, None)

    def logged_through(self, resumed: bool) -> int:
        """The last step whose lines the logs keep: -1 on a fresh start (none of an earlier
        attempt), else the restored step, less one when that step waits unlogged."""
        return (self.state.step if resumed else -1) - (UNLOGGED_STEP in self.extra_state)

    # ------------------------------------------------------------------- copies and checkpoints
    def share(self) -> None:
        """Before the first step or evaluation, and after a restore: the learner's copies take the
        trainer's adapters and optimiser state (``Learner.share_state``); a no-op while they hold them."""
        if not self._shared:
            self.learner.share_state(self.state.step)
            self._shared = True

    def save(self, number: int | None = None, extra: dict[str, Any] | None = None,
             tensors: dict[str, Any] | None = None, prune: bool = True) -> Path:
        """Write a checkpoint of the run as it is now (``checkpoint.save_checkpoint``): adapters,
        optimiser and schedule, data position, RNG states, controller tables, config. ``number``
        names it (default: the step), ``extra`` joins its ``extra_state.json``, ``tensors`` (named
        tensors) join ``extra_tensors`` in it; ``prune``: keep only the last ``keep_checkpoints`` (a
        federated site prunes by round itself). Non-finite adapters are never written
        (``NonFiniteError``)."""
        check_finite_adapters(self.learner.params, f"checkpoint step {self.state.step}")
        if self.controllers is not None:
            self.extra_state["controllers"] = self.controllers.state_dict()
        if self.curriculum is not None:
            self.extra_state["curriculum"] = self.curriculum.state_dict()
        optimizer, scheduler = self.learner.checkpoint_state()
        path = save_checkpoint(self.run_dir, self.state, self.team_model, optimizer, scheduler,
                               {**self.extra_state, **(extra or {})}, dict(self.record.config),
                               self.record.keep_checkpoints if prune else None,
                               extra_tensors={**self.extra_tensors, **(tensors or {})}, number=number)
        self._saved_step = self.state.step
        return path

    def resume(self, resume: str) -> bool:
        """Restore the checkpoint ``resume`` names ("auto" or a folder; ``teamplay.training.store.resume``
        checks its config against the run's); False when ``resume="auto"`` finds none (a fresh run)."""
        data = checkpoint_to_resume(self.record, resume)
        if data is None:
            return False
        self.restore(data)
        return True

    def restore(self, data: LoadedCheckpoint) -> None:
        """Continue from a loaded checkpoint (``checkpoint.load_checkpoint``): its adapters,
        optimiser and schedule, data position, RNG states, extra state and tensors, controller
        tables, curriculum stage. State that does not fit this team is a ``TeamplayError``."""
        path = data.path
        if self.controllers is not None and "controllers" not in data.extra:
            raise ConfigError(f"--resume: checkpoint {path} has no controller tables but "
                              f"controllers.enabled is true; resume with the run's own config")
        if self.curriculum is not None and "curriculum" not in data.extra:
            raise ConfigError(f"--resume: checkpoint {path} has no curriculum state but the config has a "
                              f"curriculum; resume with the run's own config")
        self.team_model.load_adapters(path / "adapters")
        try:
            self.learner.load_state(data.optimizer, data.scheduler)
        except (ValueError, KeyError, TypeError) as exc:
            raise CheckpointError(f"--resume: the optimizer state of {path} does not fit this team's "
                                  f"adapters ({exc}); resume with the run's own config") from None
        if self.curriculum is not None:  # before the RNG: the stage's wiring must not shift the restored draws
            self.curriculum.load_state_dict(data.extra["curriculum"])
        set_rng_state(data.rng)
        self.state, self._saved_step, self._shared = data.state, data.state.step, False
        self.extra_state, self.extra_tensors = dict(data.extra), dict(data.tensors)
        if self.controllers is not None:
            self.controllers.load_state_dict(self.extra_state["controllers"])

    def preempted(self, preemption: Preemption) -> Preempted:
        """After a SIGTERM or SIGINT: checkpoint the last completed step (unless written already) and
        say where the run stopped."""
        assert preemption.signum is not None
        step = self.state.step
        if step == 0:
            return Preempted(preemption.signum, "before the first step finished; no checkpoint written yet")
        if self._saved_step != step:
            self.save()
        return Preempted(preemption.signum,
                         f"after step {step}; checkpoint {checkpoint_dir(self.run_dir, step).name} written")

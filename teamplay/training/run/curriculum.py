"""The difficulty dial of a training run (``curriculum:``, ``teamplay.config.curriculum``): when to
raise the stage (``CurriculumSchedule``, a pure rule over the step metrics) and what a stage
change rewires (``Curriculum``).

The rule: stage s plays from its first step; after each step the step's metric joins the values
of the steps played at s; once there are ``window`` of them and their mean (of the last ``window``)
reaches ``threshold``, the next step plays stage s + 1 and its values start empty. The last stage
plays to the end of the run. Each step's metrics line gets ``curriculum``: ``stage`` (the stage the
step played), ``moving_average`` (the mean it was judged on; None while the window is not full)
and ``next_stage`` (the stage of the next step: larger than ``stage`` exactly when the step raised
it). The schedule's state (stage and values) is saved with every checkpoint
(``RunState``: ``extra_state["curriculum"]``), so a resumed run continues at the stage and with the
values of the uninterrupted one.

A stage change rewires only the training side: the task and items (loaded once per distinct task
section, and only when a stage changes them; new items start a new pass of the data order), the
env factory, the backend when the stage's scripted policies differ, and the credit stage built on
them. The team model, adapters, optimiser and held-out evaluation stay as they are.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from teamplay.agents.roles import Team
from teamplay.config import ProtocolConfig, TaskConfig
from teamplay.config.curriculum import CurriculumConfig, stage_sections
from teamplay.envs.tasks.base import Task
from teamplay.errors import ConfigError
from teamplay.records import TaskItem
from teamplay.training.wiring.curriculum import stage_run
from teamplay.training.wiring.envs import load_items
from teamplay.training.wiring.wired_run import WiredRun


class CurriculumSchedule:
    """The stage a run plays and the values that will raise it (the module's rule), for a
    curriculum of ``len(config.stages)`` stages."""

    def __init__(self, config: CurriculumConfig) -> None:
        self.config = config
        self.stage = 0
        #: the metric of each step played at ``stage`` so far, oldest first (at most ``window`` kept)
        self.values: list[float] = []

    def observe(self, value: float) -> dict[str, Any]:
        """Record one step's metric ``value`` at the current stage and raise the stage when the
        moving average reaches the threshold; returns the step's ``curriculum`` metrics."""
        played, window = self.stage, self.config.window
        self.values = [*self.values, float(value)][-window:]
        average = sum(self.values) / window if len(self.values) == window else None
        if average is not None and average >= self.config.threshold and played + 1 < len(self.config.stages):
            self.stage, self.values = played + 1, []
        return {"stage": played, "moving_average": average, "next_stage": self.stage}

    def state_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "values": list(self.values)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state_dict()``'s output; a stage this curriculum does not have is a ConfigError."""
        stage, values = state["stage"], [float(v) for v in state["values"]]
        if not 0 <= stage < len(self.config.stages) or len(values) >= self.config.window:
            raise ConfigError(f"--resume: the curriculum state {state} does not fit this curriculum "
                              f"({len(self.config.stages)} stages, window {self.config.window}); resume with the "
                              f"run's own config")
        self.stage, self.values = stage, values


class Curriculum:
    """A run's curriculum: its ``schedule`` and the wiring of the stage it plays (``wired``), from the
    ``curriculum`` section and the run's ``task``, ``protocol`` and ``team`` sections (which each
    stage overrides) over the run's own wiring ``base``.

    ``play(wired, new_pass)`` is how the trainer takes a stage's wiring (``stage_run``) for the
    next step's episodes; ``new_pass``: the stage's items are new, so the data order starts a pass
    over them. ``start()`` plays stage 0; ``after_step(metrics)``, once per step, returns the
    step's ``curriculum`` metrics and plays the next stage when the schedule raises it;
    ``state_dict``/``load_state_dict`` go with checkpoints (loading plays the restored stage, and
    keeps the restored data position). A run whose task came in Python (``Trainer(task=...)``) has
    no stage that changes the task section (``wiring.checks.check_combinations`` refused it).
    """

    def __init__(self, curriculum: CurriculumConfig, task: TaskConfig, protocol: ProtocolConfig, team: Team | None,
                 base: WiredRun, play: Callable[[WiredRun, bool], None]) -> None:
        self.curriculum, self.base, self.play = curriculum, base, play
        #: the run's own sections, which each stage overrides (``config.curriculum.stage_sections``)
        self.sections = (task, protocol, team)
        self.schedule = CurriculumSchedule(curriculum)
        self.metric = curriculum.metric
        #: each distinct task section's task and items, by its JSON (the run's own: the items it loaded)
        self._data: dict[str, tuple[Task, list[TaskItem]]] = {_key(task.model_dump(mode="json")):
                                                              (base.task, base.items)}
        self.wired: WiredRun | None = None

    def start(self) -> None:
        """Play stage 0 from the run's first step."""
        self._play(0, restored=False)

    def after_step(self, metrics: dict[str, Any]) -> dict[str, Any]:
        """The step's ``curriculum`` metrics (the module); when the step raised the stage, the next
        step plays it."""
        record = self.schedule.observe(metrics[self.metric])
        if record["next_stage"] != record["stage"]:
            self._play(record["next_stage"], restored=False)
        return record

    def state_dict(self) -> dict[str, Any]:
        return self.schedule.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue at a checkpoint's stage and values; the data position stays the checkpoint's."""
        self.schedule.load_state_dict(state)
        self._play(self.schedule.stage, restored=True)

    def _play(self, stage: int, restored: bool) -> None:
        task, protocol, team = stage_sections(*self.sections, self.curriculum.stages[stage])
        key = _key(task.model_dump(mode="json"))
        if key not in self._data:
            self._data[key] = load_items(task)
        data = self._data[key]
        new_items = self.wired is None or data[1] is not self.wired.items
        self.wired = stage_run(self.base, protocol, team, data)
        self.play(self.wired, new_items and not restored)


def _key(section: dict[str, Any]) -> str:
    return json.dumps(section, sort_keys=True)

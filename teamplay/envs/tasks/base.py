"""The task interface every benchmark implements.

A task turns a data source into ``TaskItem``s and scores completions against them. Scoring is a
plain function of (completion text, item): it returns a float in [0, 1], never raises and never
hangs, whatever the text. ``evaluate`` and ``reward`` are the same call here: a team reward is the
score of the final answer.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from teamplay.envs.tasks.answers.numeric import extract_canonical, numbers_equal
from teamplay.envs.tasks.sources import HubSpec, Row, check_load_args, check_on_bad_line, load_items
from teamplay.errors import ConfigError
from teamplay.records import TaskItem
from teamplay.registry import Registry


class Task(ABC):
    """Base class of a benchmark task.

    Subclasses set ``name``, ``splits`` and ``answer_instruction`` and implement the three methods.
    """

    #: registry name, e.g. ``"gsm8k"``
    name: str = ""
    #: splits ``load`` accepts
    splits: tuple[str, ...] = ("test",)
    #: one sentence appended to prompts telling the model how to state its final answer
    answer_instruction: str = "End with 'The answer is X.'"

    @abstractmethod
    def load(self, split: str = "test", source: str | None = None, limit: int | None = None,
             seed: int = 0) -> list[TaskItem]:
        """Load items of ``split`` from the hub (``source=None``) or from a local path.

        Raises ``DataError`` naming the path, line and field when the source is missing or
        malformed, and when the hub is unreachable (suggesting ``source=PATH``); never falls back
        to other data. ``limit`` keeps the first ``limit`` items in source order.
        """

    @abstractmethod
    def extract(self, completion: str) -> str | None:
        """The final answer found in ``completion`` in canonical form, or ``None``. Never raises."""

    @abstractmethod
    def score(self, completion: str, item: TaskItem) -> float:
        """Score in [0, 1] of ``completion`` against ``item.reference``. Never raises, never hangs."""

    def score_answer(self, answer: str | None, item: TaskItem) -> float:
        """Score an already extracted answer (``None`` scores 0). Never raises."""
        if answer is None:
            return 0.0
        return self.score(answer, item)

    def counters(self) -> dict[str, int]:
        """Running totals of this process that a training run logs with each step (MATH: its
        verifier's missed deadlines, ``verifier_deadlines_missed``); none by default."""
        return {}

    def twin_key(self, item: TaskItem) -> str:
        """Items with one key are one problem for deduplication (``distinct``): by default the prompt
        text; a task whose problems have rewordings with the same answer (a sum and its commuted twin,
        ``b + a`` for ``a + b``) may key them together."""
        return item.prompt


class NumericAnswerTask(Task):
    """A task whose answer is one number, read and scored by the GSM8K rule (gsm8k, arith).

    ``extract`` takes the completion's final number in canonical form
    (``teamplay.envs.tasks.answers.numeric.extract_canonical``: ``"1000"``, ``"-3"``, ``"2.5"``);
    ``score_answer`` is exact numeric equality with ``item.reference`` (``numbers_equal``: ``"18.0"``
    scores like ``"18"``), and ``score`` scores the completion's extracted number. Subclasses give
    the items (``load``), with canonical numbers as references.
    """

    def extract(self, completion: str) -> str | None:
        """The completion's final number in canonical form, or ``None``."""
        return extract_canonical(completion)

    def score(self, completion: str, item: TaskItem) -> float:
        """1.0 if the completion's final number equals the reference exactly, else 0.0."""
        return self.score_answer(self.extract(completion), item)

    def score_answer(self, answer: str | None, item: TaskItem) -> float:
        """1.0 if the extracted ``answer`` (e.g. ``"18"``, ``"18.0"``) equals the reference, else 0.0."""
        return numbers_equal(answer, item.reference)


class DatasetTask(Task):
    """A task whose items are the rows of a hub dataset or of a local file (gsm8k, math, gpqa).

    Subclasses set ``hub`` and implement ``row_item``; ``load`` reads and checks the rows with
    ``teamplay.envs.tasks.sources.load_items`` (bad rows, duplicate ids, empty sources).
    """

    #: the task's hub dataset, read when ``load`` gets no ``source``
    hub: HubSpec

    def __init__(self, on_bad_line: str = "error") -> None:
        """``on_bad_line``: ``"error"`` (default) stops at the first bad row of a source with an
        error naming its file and line; ``"skip"`` leaves bad rows out and warns once with their
        count (``--set task.options.on_bad_line=skip``)."""
        self.on_bad_line = check_on_bad_line(self.name, on_bad_line)

    def load(self, split: str = "test", source: str | Path | None = None, limit: int | None = None,
             seed: int = 0) -> list[TaskItem]:
        check_load_args(self.name, split, self.splits, limit)
        return load_items(self.name, split, source, self.hub, lambda row: self.row_item(row, split, seed),
                          limit, self.on_bad_line)

    @abstractmethod
    def row_item(self, row: Row, split: str, seed: int) -> TaskItem:
        """The item of one source row; ``DataError`` naming ``row.where`` when the row cannot be one."""


def _check_task(entry: Any, where: str) -> type[Task]:
    if not (inspect.isclass(entry) and issubclass(entry, Task) and not inspect.isabstract(entry)):
        raise ConfigError(f"{where}: not a concrete Task subclass (see teamplay.envs.tasks.base.Task)")
    return entry


#: tasks by name (``@register_task("gsm8k")`` on the class); a user's task as ``path.py:Class``
TASKS: Registry[type[Task]] = Registry("task", "task.name", _check_task)
register_task = TASKS.register

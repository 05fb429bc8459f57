"""Benchmark tasks by name: ``get_task("gsm8k")``, ``task_names()``.

=========  ==========================================  =============================================
name       data (hub id, or ``source=PATH``)           reference / scoring
=========  ==========================================  =============================================
gsm8k      ``openai/gsm8k`` (main)                     a number; exact numeric equality
math       ``DigitalLearningGmbH/MATH-lighteval``      LaTeX; normal form, then math_verify
math500    ``HuggingFaceH4/MATH-500``                  LaTeX; normal form, then math_verify
gpqa       ``Idavidrein/gpqa`` (gpqa_diamond)          a letter A-D; choices shuffled per seed
arith      generated (levels 1-5)                      an integer; exact numeric equality
tuples     K items of another task per item            each part as that task scores it
relay_sum  generated (sums of N operands)              an integer; exact numeric equality
=========  ==========================================  =============================================

A new benchmark is one module in ``catalog/`` with a ``Task`` subclass decorated with
``@register_task(name)`` and imported here; a user's own task needs no registration: name it in a
config by path, ``task.name: ./my_task.py:MyTask``.
"""

from __future__ import annotations

from typing import Any

from teamplay.envs.tasks.base import TASKS, DatasetTask, Task, register_task
from teamplay.envs.tasks.catalog.arith import ArithTask
from teamplay.envs.tasks.catalog.gpqa import GpqaTask
from teamplay.envs.tasks.catalog.gsm8k import Gsm8kTask
from teamplay.envs.tasks.catalog.math_tasks import Math500Task, MathTask
from teamplay.envs.tasks.catalog.relay_sum import RelaySumTask
from teamplay.envs.tasks.catalog.tuples import TupleTask
from teamplay.errors import ConfigError


def task_names() -> list[str]:
    """Names ``get_task`` accepts, sorted.

    >>> task_names()
    ['arith', 'gpqa', 'gsm8k', 'math', 'math500', 'relay_sum', 'tuples']
    """
    return TASKS.names()


def get_task(name: str, **options: Any) -> Task:
    """A new task object for ``name``; ``options`` go to its constructor (``level=3`` for arith;
    ``on_bad_line="skip"`` for a task that reads data, see ``DatasetTask``).

    ``name`` may also be a user's file, ``path/to/my_task.py:MyTask`` (its code runs on import).
    Raises ``ConfigError`` for an unknown name (listing the known ones) or an unknown option.
    """
    cls = TASKS.get(name)
    try:
        return cls(**options)
    except TypeError as exc:
        raise ConfigError(f"task {name!r} does not take options {sorted(options)}: {exc}") from exc


__all__ = ["TASKS", "ArithTask", "DatasetTask", "GpqaTask", "Gsm8kTask", "Math500Task", "MathTask", "RelaySumTask",
           "Task", "TupleTask", "get_task", "register_task", "task_names"]

"""Benchmark tasks by name: ``get_task("gsm8k")``, ``task_names()``.

=========  ==========================================  =============================================
name       data (hub id, or ``source=PATH``)           reference / scoring
=========  ==========================================  =============================================
gsm8k      ``openai/gsm8k`` (main)                     a number; exact numeric equality
math       ``DigitalLearningGmbH/MATH-lighteval``      LaTeX; normal form, then math_verify
math500    ``HuggingFaceH4/MATH-500``                  LaTeX; normal form, then math_verify
gpqa       ``Idavidrein/gpqa`` (gpqa_diamond)          a letter A-D; choices shuffled per seed
arith      generated (levels 1-5)                      an integer; exact numeric equality
=========  ==========================================  =============================================

A new benchmark is one module in this folder with a ``Task`` subclass plus one line in ``_TASKS``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from teamplay.envs.tasks.arith import ArithTask
from teamplay.envs.tasks.base import Task
from teamplay.envs.tasks.gpqa import GpqaTask
from teamplay.envs.tasks.gsm8k import Gsm8kTask
from teamplay.envs.tasks.math_tasks import Math500Task, MathTask
from teamplay.errors import ConfigError

_TASKS: dict[str, Callable[..., Task]] = {
    "gsm8k": Gsm8kTask,
    "math": MathTask,
    "math500": Math500Task,
    "gpqa": GpqaTask,
    "arith": ArithTask,
}


def task_names() -> list[str]:
    """Names ``get_task`` accepts, sorted.

    >>> task_names()
    ['arith', 'gpqa', 'gsm8k', 'math', 'math500']
    """
    return sorted(_TASKS)


def get_task(name: str, **options: Any) -> Task:
    """A new task object for ``name``; ``options`` go to its constructor (``level=3`` for arith).

    Raises ``ConfigError`` for an unknown name (listing the known ones) or an unknown option.
    """
    if name not in _TASKS:
        raise ConfigError(f"unknown task {name!r}; known tasks: {', '.join(task_names())}")
    try:
        return _TASKS[name](**options)
    except TypeError as exc:
        raise ConfigError(f"task {name!r} does not take options {sorted(options)}: {exc}") from exc


__all__ = ["ArithTask", "GpqaTask", "Gsm8kTask", "Math500Task", "MathTask", "Task", "get_task",
           "task_names"]

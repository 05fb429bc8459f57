"""``tuples``: K problems of another task as one item, for teams whose agents each solve their own
(the ``split`` protocol).

An item of ``tuples`` holds K consecutive items of the wrapped task (arith, gsm8k, math, ... read by
that task's own loader, so a missing or malformed source fails as it would there). Its
``metadata["parts"]`` lists them (id, prompt, reference, metadata), its prompt numbers them and its
reference joins their references with ``"; "``. ``part(item, j)`` rebuilds the j-th problem; the
wrapped task extracts and scores answers to it, so a part is scored exactly as the problem alone.

Scoring one completion against a whole tuple (``score``) has one rule: the mean of its score
against each part (a single answer is right for the parts whose reference it is). A ``split`` team
is never scored that way: its protocol scores each agent's answer against that agent's own part.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from teamplay.envs.tasks.base import TASKS, Task, register_task
from teamplay.errors import ConfigError
from teamplay.records import TaskItem

#: most problems per item (the split protocol's agents are bounded the same way)
MAX_PARTS = 64


@register_task("tuples")
class TupleTask(Task):
    """K problems of ``task`` per item (see the module).

    Args:
        task: the wrapped task's registered name (or a ``Task`` object, e.g. a test's own).
        k: problems per item, 1 to :data:`MAX_PARTS`.
        options: the wrapped task's options (``{"level": 1, "max_operand": 40}`` for arith).
        distinct: no problem twice among a load's parts (distinct by the wrapped task's
            ``twin_key``): the parts are the split's distinct problems in order, read from the whole
            split (``limit=None``), so a held-out set of tuples repeats no problem.
    """

    name = "tuples"

    def __init__(self, task: str | Task = "arith", k: int = 2, options: dict[str, Any] | None = None,
                 distinct: bool = False) -> None:
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_PARTS:
            raise ConfigError(f"tuples: k must be an integer from 1 to {MAX_PARTS}, got {k!r}")
        if not isinstance(distinct, bool):
            raise ConfigError(f"tuples: distinct must be true or false, got {distinct!r}")
        self.distinct = distinct
        if isinstance(task, Task):
            if options:
                raise ConfigError("tuples: options go to a task given by name, not to a Task object")
            self.base = task
        elif task == self.name:
            raise ConfigError("tuples: the wrapped task cannot be tuples itself")
        else:
            cls = TASKS.get(task)
            try:
                self.base = cls(**dict(options or {}))
            except TypeError as exc:
                raise ConfigError(f"tuples: task {task!r} does not take options {sorted(options or {})}: "
                                  f"{exc}") from None
        self.k = k
        self.splits = self.base.splits
        self.answer_instruction = self.base.answer_instruction

    @property
    def parts_per_item(self) -> int:
        """K: the problems each item holds (what the ``split`` protocol checks against its team)."""
        return self.k

    def load(self, split: str = "test", source: str | Path | None = None, limit: int | None = None,
             seed: int = 0) -> list[TaskItem]:
        """The first ``limit`` tuples (all with ``None``): items ``jK .. jK + K - 1`` of the wrapped
        task form tuple j; a remainder of fewer than K items is left out. With ``distinct`` the items
        are the whole split's distinct problems, in order."""
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise ConfigError(f"tuples: limit must be a positive integer or None, got {limit!r}")
        if self.distinct:
            items = self._distinct(self.base.load(split, source=source, limit=None, seed=seed))
        else:
            items = self.base.load(split, source=source, limit=None if limit is None else limit * self.k, seed=seed)
        out = [self._tuple(items[j:j + self.k]) for j in range(0, len(items) - self.k + 1, self.k)]
        if limit is not None and len(out) < limit:
            raise ConfigError(f"tuples: {self.base.name} ({split}) gave {len(items)} "
                              f"{'distinct ' if self.distinct else ''}items, enough for {len(out)} tuples of "
                              f"{self.k}, not the {limit} asked for")
        return out if limit is None else out[:limit]

    def _distinct(self, items: list[TaskItem]) -> list[TaskItem]:
        seen: set[str] = set()
        kept = []
        for item in items:
            key = self.base.twin_key(item)
            if key not in seen:
                seen.add(key)
                kept.append(item)
        return kept

    def _tuple(self, parts: list[TaskItem]) -> TaskItem:
        prompt = "\n".join(f"Problem {j + 1}: {p.prompt}" for j, p in enumerate(parts))
        return TaskItem(id="+".join(p.id for p in parts), prompt=prompt,
                        reference="; ".join(p.reference for p in parts),
                        metadata={"parts": tuple(p.to_dict() for p in parts), "task": self.base.name})

    def extract(self, completion: str) -> str | None:
        return self.base.extract(completion)

    def counters(self) -> dict[str, int]:
        return self.base.counters()  # its parts are the wrapped task's (MATH's verifier misses)

    def score(self, completion: str, item: TaskItem) -> float:
        """A part is scored by the wrapped task; a whole tuple by the mean over its parts (module)."""
        if "parts" not in item.metadata:
            return self.base.score(completion, item)
        parts = [part(item, j) for j in range(len(item.metadata["parts"]))]
        return sum(self.base.score(completion, p) for p in parts) / len(parts)


def part(item: TaskItem, j: int) -> TaskItem:
    """The j-th problem of a tuple item (as the wrapped task loaded it)."""
    d = item.metadata["parts"][j]
    return TaskItem(id=d["id"], prompt=d["prompt"], reference=d["reference"], metadata=d.get("metadata", {}))


def parts_of(item: TaskItem) -> int:
    """How many problems ``item`` holds (0 for an item that is not a tuple)."""
    return len(item.metadata.get("parts", ()))

"""Progress a person can see, wherever the output goes.

On a terminal a command shows rich's bars. Anywhere else (a file, a pipe, a job scheduler's log,
``nohup``, CI) a bar is invisible until it ends, so the commands print one plain line per event
instead, on stderr, each complete and never rewritten:

* ``teamplay train``: one line per training step (``step 3/12: reward 0.42, 35 s``) and one per
  batch of a held-out evaluation (``held-out evaluation (before): batch 2, 41 s``);
* ``teamplay eval``: one line per batch (one lock-step ``generate`` call of up to
  ``backend.max_batch`` requests) with the episodes done so far.

A "batch" is the unit the generation backend works in, so a line appears at least as often as the
model is called, however many problems an evaluation has.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


def progress_bar(console: Console) -> Progress:
    """Rich's bar on ``console``: description, bar, done/total, elapsed, remaining."""
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(), console=console,
                    transient=False)


def plain_line(console: Console, text: str) -> None:
    """``text`` as one line on ``console``, never wrapped or marked up (a log line to grep)."""
    console.print(text, highlight=False, markup=False, soft_wrap=True)


class _Progress:
    """Rich's bars on a terminal, plain lines (``plain``) elsewhere; a context manager either way."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.plain = not console.is_terminal
        self.bar = None if self.plain else progress_bar(console)

    def __enter__(self) -> Any:
        if self.bar is not None:
            self.bar.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)


class TrainProgress(_Progress):
    """A training run's progress: a bar on a terminal, else one line per step and per held-out batch.

    Use as a context manager around ``Trainer.train``; pass ``step`` as the trainer's ``on_step``,
    ``evaluation`` as ``on_eval`` and ``eval_batch`` as ``on_eval_batch``. ``start(step)`` sets
    where the run starts (a resumed run: its checkpoint's step).
    """

    def __init__(self, console: Console, total: int, name: str = "train") -> None:
        super().__init__(console)
        self.total, self.name = total, name
        self.job = None if self.bar is None else self.bar.add_task(name, total=total)
        self._label, self._batches, self._eval_t0 = "", 0, 0.0

    def start(self, step: int) -> None:
        if self.bar is not None:
            self.bar.update(self.job, completed=step)

    def step(self, step: int, metrics: dict[str, Any]) -> None:
        """After training step ``step`` (1-based) with its ``metrics`` (``reward_mean``, or a warm
        start's ``loss``; ``seconds``)."""
        reward, loss, seconds = metrics.get("reward_mean"), metrics.get("loss"), metrics.get("seconds")
        shown = [f"reward {reward:.2f}" if reward is not None else f"loss {loss:.3f}" if loss is not None else "",
                 f"{seconds:.0f} s" if seconds is not None else ""]
        if self.bar is not None:
            self.bar.update(self.job, completed=step,
                            description=" · ".join([self.name, *(s for s in shown if s)]) +
                            ("/step" if seconds is not None else ""))
        else:
            plain_line(self.console, f"{self.name} step {step}/{self.total}: " + ", ".join(s for s in shown if s))

    def evaluation(self, label: str) -> None:
        """Before a held-out evaluation (``label``: before, step N, after)."""
        self._label, self._batches, self._eval_t0 = label, 0, time.perf_counter()
        if self.bar is not None:
            self.bar.console.print(f"held-out evaluation ({label}) ...", highlight=False)
        else:
            plain_line(self.console, f"held-out evaluation ({label}) ...")

    def eval_batch(self) -> None:
        """Before each batch of a held-out evaluation: a line where no bar is shown."""
        self._batches += 1
        if self.plain:
            plain_line(self.console, f"held-out evaluation ({self._label}): batch {self._batches}, "
                                     f"{time.perf_counter() - self._eval_t0:.0f} s")


class EvalProgress(_Progress):
    """``teamplay eval``'s progress over one or more evaluations: a bar each on a terminal, else a
    line per batch (``eval arith/vote: batch 3, 8 of 24 episodes done, 41 s``) and one at the end.

    ``begin(label, total)`` before each evaluation; ``episode()`` as each episode ends (the
    ``on_episode`` of ``evaluate``); ``batch()`` before each ``generate`` call (the runner's
    ``before_generate``); ``end()`` after it.
    """

    def __init__(self, console: Console) -> None:
        super().__init__(console)
        self.job = None
        self._label, self._total, self._done, self._batches, self._t0 = "", 0, 0, 0, 0.0

    def begin(self, label: str, total: int) -> None:
        self._label, self._total, self._done, self._batches = label, total, 0, 0
        self._t0 = time.perf_counter()
        if self.bar is not None:
            self.job = self.bar.add_task(label, total=total)

    def episode(self, _: Any = None) -> None:
        self._done += 1
        if self.bar is not None:
            self.bar.advance(self.job)

    def batch(self) -> None:
        self._batches += 1
        if self.plain:
            plain_line(self.console, f"{self._label}: batch {self._batches}, {self._done} of {self._total} "
                                     f"episodes done, {time.perf_counter() - self._t0:.0f} s")

    def end(self) -> None:
        if self.plain:
            plain_line(self.console, f"{self._label}: {self._done} of {self._total} episodes done in "
                                     f"{time.perf_counter() - self._t0:.0f} s ({self._batches} batches)")

"""Preemption: SIGTERM or SIGINT stops a training run cleanly, at the next safe point.

The promise (``teamplay train`` and a sequential ``teamplay sweep``; ``teamplay federate`` keeps it
per round, abandoning the round under way: ``teamplay.federated.server``):

* the first SIGTERM or SIGINT (a cluster's preemption notice, Ctrl-C) only sets a flag, and says
  so at once on stderr ("SIGINT: stopping after this step; press Ctrl-C again to stop now": a
  person who pressed Ctrl-C must not wait minutes in silence for the step to end). The
  trainer reads it at safe points: between steps (a step that has begun is finished), and before
  each lock-step turn of a held-out evaluation, which is abandoned (a resumed run repeats it);
* at that point the run writes the checkpoint of its last completed step (unless the loop just
  wrote it), releases the run lock and stops with ``Preempted``: one ``warning:`` line ("preempted
  by SIGTERM after step 3; checkpoint step-000003 written; resume with --resume auto") and exit
  status ``EXIT_PREEMPTED`` = 75 (``EX_TEMPFAIL`` of sysexits.h: try again later);
* ``--resume auto`` then continues to the same metrics and adapters as a run never interrupted. A
  step whose held-out evaluation was abandoned is checkpointed with its metrics lines waiting in
  the checkpoint's extra state (``UNLOGGED_STEP``) and the global RNG state of before the
  evaluation; the resumed run evaluates and logs that step first;
* a second signal stops at once (``Interrupted``, exit status 128 + the signal number: 143 for
  SIGTERM, 130 for SIGINT) without damage: a checkpoint being written is abandoned in its temporary
  folder (``teamplay.training.store.checkpoint``), so the previous checkpoint stays the latest, intact one;
  the run lock is an OS lock and goes with the process. A third signal meets the handlers that
  were there before training (by default: SIGTERM ends the process, SIGINT raises
  ``KeyboardInterrupt``).

Handlers are installed only in the main thread (Python allows no other), only while
``Trainer.train`` runs (or a sweep's runs, around model loading too; or a federated run, from its
model loading on), and the previous ones are restored after. A rollout of a training step is
never abandoned half-way: its data position and random streams are already spent, and the step is
the unit a checkpoint describes.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from teamplay.errors import TeamplayError

#: exit status of a run stopped cleanly by SIGTERM or SIGINT: sysexits.h's EX_TEMPFAIL ("temporary
#: failure; the user is invited to retry"): distinct from 0 (done), 1 (a bug), 2 (a user error) and
#: 128 + N (killed by signal N, or a second signal: stopped at once)
EXIT_PREEMPTED = 75
#: the signals that ask for a clean stop
SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: the key of ``extra_state`` (checkpoint ``extra_state.json``) holding a step whose held-out
#: evaluation was abandoned: ``{"step", "metrics", "episodes"}``, its lines not yet in the logs
UNLOGGED_STEP = "unlogged_step"


def signal_name(signum: int) -> str:
    """``15`` -> ``"SIGTERM"``."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class Preempted(TeamplayError):
    """The run stopped cleanly on SIGTERM or SIGINT after checkpointing its last completed step.

    ``where`` says how far it got ("after step 3; checkpoint step-000003 written"), ``hint`` how to
    continue; the CLI prints the message as one ``warning:`` line and exits with ``exit_status``.
    """

    exit_status = EXIT_PREEMPTED

    def __init__(self, signum: int, where: str, hint: str = "resume with --resume auto") -> None:
        self.signum, self.where, self.hint = signum, where, hint
        super().__init__(f"preempted by {signal_name(signum)} {where}; {hint}")

    def __reduce__(self) -> tuple[Any, ...]:  # pickled across processes (a Ray task's error)
        return (Preempted, (self.signum, self.where, self.hint))

    def with_hint(self, hint: str) -> Preempted:
        """The same stop, with another way to continue (a sweep is continued by running it again)."""
        return Preempted(self.signum, self.where, hint)


class Interrupted(KeyboardInterrupt):
    """A second signal during a clean stop: the run stopped at once (exit status 128 + signal)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.exit_status = 128 + signum
        super().__init__(f"second {signal_name(signum)}: stopped at once (a checkpoint being written is "
                         "abandoned); the checkpoints written before are intact and --resume auto "
                         "continues the newest")


class StopRequested(Exception):
    """Raised at a safe point inside a loop that may be abandoned (a held-out evaluation) once a
    stop was asked for; the trainer turns it into ``Preempted``."""


class Preemption:
    """The flag a signal handler sets: ``signum`` of the first SIGTERM/SIGINT, or None.

    Use ``preemption_handlers()`` to install it; an instance that was never installed is never
    requested (what a trainer holds outside ``train``).
    """

    def __init__(self, stopping: str = "after this step (its checkpoint is written)") -> None:
        self.signum: int | None = None
        #: when the run stops, as the acknowledgement of the first signal says it
        self.stopping = stopping
        self._previous: dict[int, Any] = {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def check(self) -> None:
        """Raise ``StopRequested`` when a stop was asked for (a safe point of an abandonable loop)."""
        if self.signum is not None:
            raise StopRequested(signal_name(self.signum))

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None:  # the second signal: no more waiting
            self._restore()
            raise Interrupted(signum)
        self.signum = signum
        acknowledge(signum, self.stopping)

    def _install(self) -> None:
        for sig in SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)

    def _restore(self) -> None:
        while self._previous:
            sig, previous = self._previous.popitem()
            # None: a handler installed from C, which Python cannot put back; the default is the safe guess
            signal.signal(sig, signal.SIG_DFL if previous is None else previous)


def acknowledge(signum: int, stopping: str) -> None:
    """Say on stderr, at once, that the first ``signum`` was heard, when the run will stop
    (``stopping``) and what a second signal does.

    Written with ``os.write`` on file descriptor 2: a signal handler runs between two bytecodes of
    the main thread, which may be inside a write to ``sys.stderr`` itself (a buffered stream would
    refuse the reentrant call). On a terminal the line first clears the one under the cursor (a
    progress bar redraws itself below it)."""
    name = signal_name(signum)
    again = "press Ctrl-C again" if signum == signal.SIGINT else f"send {name} again"
    line = f"{name}: stopping {stopping}; {again} to stop now\n"
    try:
        prefix = "\r\x1b[2K" if os.isatty(2) else ""
        os.write(2, (prefix + line).encode())
    except OSError:  # no stderr (closed, a daemon): the stop goes on without the line
        pass


def active_preemption() -> Preemption | None:
    """The ``Preemption`` whose handler is installed now, if any."""
    owner = getattr(signal.getsignal(signal.SIGTERM), "__self__", None)
    return owner if isinstance(owner, Preemption) else None


@contextmanager
def preemption_handlers(stopping: str = "after this step (its checkpoint is written)") -> Iterator[Preemption]:
    """SIGTERM and SIGINT handlers that set a ``Preemption`` flag, for the body of the ``with``;
    ``stopping`` says when the run stops, in the line that acknowledges the first signal.

    Nested use shares the outer flag (a sweep's handlers cover the model loading of each run, and
    its trainer's ``train`` reads the same flag). Outside the main thread nothing is installed and
    the flag is never set. The previous handlers are restored on exit.
    """
    outer = active_preemption()
    if outer is not None:
        yield outer
        return
    preemption = Preemption(stopping)
    if threading.current_thread() is not threading.main_thread():
        yield preemption
        return
    preemption._install()
    try:
        yield preemption
    finally:
        preemption._restore()

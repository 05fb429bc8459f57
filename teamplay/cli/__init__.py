"""The ``teamplay`` command: train, sweep, federate, eval, play, serve, export, credit, report, list.

Commands by family: ``training`` (train, sweep, federate), ``evaluation`` (eval, play),
``deployment`` (serve, export) and ``inspection`` (credit, report, list), on ``app`` (the Typer
app, its consoles, the one-line error handling and the options the commands share), ``tables``
(the result tables they print) and ``progress`` (rich's bars on a terminal, one plain line per
training step or evaluation batch elsewhere).

Every user error (bad config, missing file, unknown name, damaged checkpoint, a run folder in use)
and every file-system failure (full disk, read-only folder, an output path that is a file) is
printed as one ``error:`` line with exit status 2, never wrapped, even when stderr is a pipe; a
traceback means a bug in teamplay. teamplay's warnings (a damaged checkpoint skipped by
``--resume auto``, a torn metrics line dropped by ``report``) are one ``warning:`` line each.
SIGTERM or SIGINT during ``train``, ``sweep`` or ``federate`` stops at the next safe point with a
checkpoint, one ``warning:`` line and exit status 75 (``teamplay.training.run.preemption``).
"""

# ruff: noqa: I001, F401  (imported to register their commands, in the order --help lists them)
from teamplay.cli import training, sft, evaluation, deployment, inspection
from teamplay.cli.app import app

__all__ = ["app", "main"]


def main() -> None:  # pragma: no cover - console entry point
    app()

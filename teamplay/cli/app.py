"""The ``teamplay`` Typer app and what every command shares: ``command``, which registers one with
one ``error:`` or ``warning:`` line per user error (``user_errors``), the consoles, the shortcut
flags as ``--set`` overrides, and the options several commands take (progress: ``progress``)."""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from functools import wraps
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

from teamplay.errors import TeamplayError, TeamplayWarning
from teamplay.training.run.preemption import Interrupted, Preempted

# transformers 5 warns about its own deprecated attribute each time peft builds LoRA layers: noise
# for a user, nothing they can change.
warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated")

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Train and evaluate teams of cooperating LLM agents.")
console = Console()
err_console = Console(stderr=True)


def user_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn a TeamplayError, or an OSError of the file system (a full disk, a read-only folder, an
    output path that is a file), into one ``error:`` line with exit status 2; show teamplay's own
    warnings (a skipped damaged checkpoint) as one ``warning:`` line each."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("always", TeamplayWarning)
                warnings.showwarning = _show_warning
                return fn(*args, **kwargs)
        except (Preempted, Interrupted) as exc:  # SIGTERM/SIGINT: a clean stop (75), or at once on a second one
            _one_line("warning", str(exc))
            raise typer.Exit(exc.exit_status) from None
        except TeamplayError as exc:
            _one_line("error", str(exc))
            raise typer.Exit(2) from None
        except OSError as exc:
            where = f" ({exc.filename})" if exc.filename else ""
            _one_line("error", f"{exc.strerror or exc}{where}")
            raise typer.Exit(2) from None
        except KeyboardInterrupt:
            err_console.print("interrupted: results written so far are kept")
            raise typer.Exit(130) from None

    return wrapper


def command(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated function as the command ``teamplay NAME``, its user errors reported by
    ``user_errors``: every command fails the same way, one line and exit status 2."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        return app.command(name)(user_errors(fn))

    return register


def _one_line(label: str, message: str) -> None:
    """``label: message`` on stderr as ONE line: rich would wrap it at the width it guesses (80
    columns when stderr is a pipe), and a log reader or ``grep error:`` would get half a message."""
    message = " ".join(message.split())
    err_console.print(f"[bold red]{label}:[/] {escape(message)}", highlight=False, markup=True, soft_wrap=True)


_default_showwarning = warnings.showwarning


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    if issubclass(category, TeamplayWarning):
        _one_line("warning", str(message))
    else:
        _default_showwarning(message, category, filename, lineno, file, line)


def shortcut_overrides(**flags: Any) -> list[str]:
    """CLI shortcut flags (``--task gsm8k``) as ``--set`` overrides; None means not given."""
    return [f"{key}={json.dumps(value) if not isinstance(value, str) else value}"
            for key, value in flags.items() if value is not None]


ConfigOpt = typer.Option(None, "--config", "-c", help="YAML config file (see configs/).")
SetOpt = typer.Option([], "--set", help="Override a config field: --set sampling.temperature=0.7")
TeamOpt = typer.Option(None, "--team", help="A team folder instead of --config: an export (teamplay export) "
                                            "or a run folder; its task, team, adapters, controllers and "
                                            "decoding (change them with --set and the flags).")
SourceOpt = typer.Option(None, help="Local data file (or 'level=N' for arith).")
ModelOpt = typer.Option(None, help="Hub id, local path or 'smollm2-135m'.")
BackendOpt = typer.Option(None, help="hf, vllm or scripted.")
TemperatureOpt = typer.Option(None, help="Sampling temperature (0 = greedy).")
SeedOpt = typer.Option(None, help="Seed.")
RunFolderOpt = typer.Option(None, "--output", "-o", help="Run folder.")

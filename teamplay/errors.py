"""User-facing errors.

Every error a user can cause (bad config, missing file, malformed data, unknown name) is a
``TeamplayError`` with a message that says what was wrong and what to do; the CLI prints it as one
line and exits with status 2 instead of showing a traceback.
"""

from __future__ import annotations

import difflib
import warnings
from collections.abc import Iterable


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`` (did you mean 'X'?)`` for the known name closest to a misspelt ``name``, or ``""``
    when none is close (difflib's ratio of at least 0.6).

    >>> did_you_mean("shaply", ["grpo", "shapley"]), did_you_mean("zzz", ["grpo"])
    (" (did you mean 'shapley'?)", '')
    """
    close = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


class TeamplayError(Exception):
    """An error the user can act on; its message is shown as is."""


class ConfigError(TeamplayError, ValueError):
    """A configuration value is invalid; the message names the field and the allowed values."""


class DataError(TeamplayError, ValueError):
    """A data source is missing or malformed; the message names the path/row/field."""


class ModelLoadError(TeamplayError):
    """A model could not be loaded; the message names what was tried."""


class TeamplayWarning(UserWarning):
    """Something the user should know that did not stop the run (a damaged checkpoint skipped on
    resume); the CLI shows it as one ``warning:`` line."""


class DeprecatedNameWarning(TeamplayWarning):
    """An old name (a config key, a scripted policy) was read as its new one; the next release
    refuses it (``teamplay.config.deprecated`` moves a renamed config key)."""


def warn_renamed(old: str, new: str) -> None:
    """The one warning line of a renamed name, naming both: ``OLD is now NEW; ...``."""
    warnings.warn(DeprecatedNameWarning(f"{old} is now {new}; the old name is read until the next release, "
                                        f"then refused"), stacklevel=3)

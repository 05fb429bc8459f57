"""Renamed config names that still load for one release, each with one warning line naming both.

A renamed key is moved to its new name before validation (``renamed_key``, called from the
section's ``model_validator(mode="before")``), so the strict section never sees the old one; the old
and the new key given together is one error line, since the two could disagree. A renamed value
(a scripted policy's name) is replaced by ``renamed_value``. Either warns with a
``DeprecatedNameWarning`` (a ``TeamplayWarning``: the CLI shows it as one ``warning:`` line).

The old names still read: ``distributed.max_staleness`` (now ``distributed.max_worker_lag``) and the
scripted policy ``oracle`` (now ``truthful``); the next release refuses them.
"""

from __future__ import annotations

import warnings
from typing import Any

from teamplay.errors import TeamplayWarning


class DeprecatedNameWarning(TeamplayWarning):
    """An old name was read and mapped to its new one; the next release refuses it."""


def warn_renamed(old: str, new: str) -> None:
    """The one warning line of a renamed name: ``old is now new; ...``."""
    warnings.warn(DeprecatedNameWarning(f"{old} is now {new}; the old name is read until the next release, "
                                        f"then refused"), stacklevel=3)


def renamed_key(data: Any, section: str, old: str, new: str) -> Any:
    """``data`` (a section's raw mapping) with key ``old`` moved to ``new``, warning once; ``data``
    itself when it has no ``old`` (or is not a mapping: validation refuses it then). Both given:
    ValueError (one config error line), since they could disagree.

    >>> renamed_key({"a": 1}, "s", "old", "new")
    {'a': 1}
    """
    if not isinstance(data, dict) or old not in data:
        return data
    if new in data:
        raise ValueError(f"{section}.{old} and {section}.{new} are given: {old} is the old name of {new}; "
                         f"keep {new} only")
    warn_renamed(f"{section}.{old}", f"{section}.{new}")
    return {(new if key == old else key): value for key, value in data.items()}


def renamed_value(value: str, old: str, new: str, what: str) -> str:
    """``new`` when ``value`` is ``old`` (warning once that ``what old`` is now ``what new``), else
    ``value``.

    >>> renamed_value("grpo", "oracle", "truthful", "scripted policy")
    'grpo'
    """
    if value != old:
        return value
    warn_renamed(f"{what} {old!r}", f"{what} {new!r}")
    return new

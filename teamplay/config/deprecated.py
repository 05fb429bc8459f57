"""Renamed config keys that still load for one release, each with one warning line naming both.

A renamed key is moved to its new name before validation (``renamed_key``, called from the section's
``model_validator(mode="before")``), so the strict section never sees the old one; the old and the
new key given together is one error line, since the two could disagree. The warning is a
``DeprecatedNameWarning`` (``teamplay.errors.warn_renamed``; a ``TeamplayWarning``, which the CLI
shows as one ``warning:`` line), the one a renamed scripted policy gives too
(``teamplay.agents.backends.scripted.canonical_policy``).

The old names still read: ``distributed.max_staleness`` (now ``distributed.max_worker_lag``) and the
scripted policy ``oracle`` (now ``truthful``); the next release refuses them.
"""

from __future__ import annotations

from typing import Any

from teamplay.errors import warn_renamed


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

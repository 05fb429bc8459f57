"""Votes over agents' answers, shared by protocols and by credit characteristic functions. Two rules,
two names: ``plurality`` (most votes) and ``strict_majority`` (more than half of all voters).

Rule of ``plurality`` (the team answer of ``vote``, ``debate`` and a YAML protocol's ``final: {rule:
plurality}``): ``None`` answers (nothing parsable) do not vote; the answer with the most votes wins;
a tie is broken in favour of the tied answer whose first vote came earliest in the given order. No
votes at all gives ``None``.

>>> plurality(["4", None, "5", "5", "4"])
'4'
>>> plurality(["7", "8", "8"])
'8'
>>> plurality([None, None]) is None
True

``strict_majority`` is the threshold rule of the ``vote`` protocol's ``rule: majority``: the answer
voted by more than half of *all* voters (abstainers count as voters), else ``None``; a team reward
under it is ``[number of right voters > K / 2]`` whenever the right answers are one string.

>>> strict_majority(["4", "4", "5"]), strict_majority(["4", None, "5"]) is None
('4', True)
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any


def plurality(answers: Sequence[str | None]) -> str | None:
    """The answer with the most votes, ties to the earliest voted (module docstring)."""
    counts: dict[str, int] = {}
    for answer in answers:
        if answer is not None:
            counts[answer] = counts.get(answer, 0) + 1
    if not counts:
        return None
    best = max(counts.values())
    # dicts keep insertion order, so the first answer reaching `best` is the earliest-voted tie.
    return next(a for a, c in counts.items() if c == best)


def strict_majority(answers: Sequence[str | None]) -> str | None:
    """The answer given by more than ``len(answers) / 2`` of the voters (``None`` answers count as
    voters that back nothing), or ``None`` when no answer has that many."""
    counts: dict[str, int] = {}
    for answer in answers:
        if answer is not None:
            counts[answer] = counts.get(answer, 0) + 1
    return next((a for a, c in counts.items() if 2 * c > len(answers)), None)


def __getattr__(name: str) -> Any:
    # ``majority`` was the old name of ``plurality`` (it never meant more than half): read for one
    # release with one warning line, then refused
    if name == "majority":
        warnings.warn(DeprecationWarning("teamplay.envs.voting.majority is now plurality (strict_majority is "
                                         "the more-than-half rule); the old name is read until the next release, "
                                         "then refused"), stacklevel=2)
        return plurality
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""Majority vote over agents' answers, shared by protocols and by credit characteristic functions.

Rule of ``majority`` (the plurality rule, used everywhere): ``None`` answers (nothing parsable) do not vote; the answer
with the most votes wins; a tie is broken in favour of the tied answer whose first vote came
earliest in the given order. No votes at all gives ``None``.

>>> majority(["4", None, "5", "5", "4"])
'4'
>>> majority(["7", "8", "8"])
'8'
>>> majority([None, None]) is None
True

``strict_majority`` is the threshold rule of the ``vote`` protocol's ``rule: majority``: the answer
voted by more than half of *all* voters (abstainers count as voters), else ``None``; a team reward
under it is ``[number of right voters > K / 2]`` whenever the right answers are one string.

>>> strict_majority(["4", "4", "5"]), strict_majority(["4", None, "5"]) is None
('4', True)
"""

from __future__ import annotations

from collections.abc import Sequence


def majority(answers: Sequence[str | None]) -> str | None:
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

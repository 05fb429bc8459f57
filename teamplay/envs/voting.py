"""Majority vote over agents' answers, shared by protocols and by credit characteristic functions.

Rule (one rule, used everywhere): ``None`` answers (nothing parsable) do not vote; the answer
with the most votes wins; a tie is broken in favour of the tied answer whose first vote came
earliest in the given order. No votes at all gives ``None``.

>>> majority(["4", None, "5", "5", "4"])
'4'
>>> majority(["7", "8", "8"])
'8'
>>> majority([None, None]) is None
True
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

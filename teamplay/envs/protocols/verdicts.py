"""A reviewer's verdict, read once for every protocol that reviews (``proposer_reviewer``, ``review``)
and for the credit and controllers that score reviews.

* ``parse_verdict``: ``"RIGHT"``, ``"WRONG"`` or None from the first non-empty line of a review:
  RIGHT/CORRECT or WRONG/INCORRECT (case-insensitive), after an optional ``Verdict`` and
  punctuation (markdown such as ``**`` ignored); anything else is no verdict.
* ``VerdictPrefix``: the type of every option holding the text a review reply starts with: a
  ``ReplyPrefix`` (one line, at most 64 characters, ``teamplay.envs.protocols.base``) that
  ``check_verdict_prefix`` accepts: it does not read as a verdict itself and does once RIGHT or
  WRONG follows it.
* ``review_outcome``: what a review that may correct the proposal (``review``) did with it, one
  of ``OUTCOMES``.

>>> parse_verdict("Verdict: **wrong**, 3 + 4 = 7")
'WRONG'
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

from teamplay.envs.protocols.base import ReplyPrefix
from teamplay.records import Message

_VERDICT = re.compile(r"^\W*(?:verdict\W*)?(INCORRECT|CORRECT|WRONG|RIGHT)\b", re.IGNORECASE)

#: what a review did with the proposal (``review_outcome``); only ``adopted`` changes the answer
OUTCOMES = ("kept", "adopted", "no_verdict", "no_answer")


def parse_verdict(text: str) -> str | None:
    """``"RIGHT"``, ``"WRONG"`` or ``None`` from the first non-empty line of a review.

    >>> parse_verdict("**RIGHT**\\nThe sum is 7.")
    'RIGHT'
    >>> parse_verdict("\\n  Incorrect: 3 + 4 is 7, not 8.")
    'WRONG'
    >>> parse_verdict("I think it is right.") is None
    True
    """
    first = next((line for line in text.splitlines() if line.strip()), "")
    match = _VERDICT.match(first)
    if match is None:
        return None
    return "RIGHT" if match.group(1).upper() in ("RIGHT", "CORRECT") else "WRONG"


def check_verdict_prefix(value: str) -> str:
    """A review reply's prefix ('' or e.g. 'Verdict:', already one line: ``ReplyPrefix``): it must
    not read as a verdict itself, and must read as one when RIGHT or WRONG follows it."""
    if not value:
        return value
    if parse_verdict(value) is not None:
        raise ValueError(f"{value!r} already reads as a verdict; use a prefix without RIGHT/WRONG, e.g. "
                         f"'Verdict:'")
    if parse_verdict(value + " RIGHT") != "RIGHT" or parse_verdict(value + " WRONG") != "WRONG":
        raise ValueError(f"{value!r} followed by RIGHT or WRONG does not parse as a verdict (the first line "
                         f"must be: optional 'Verdict' and punctuation, then the verdict), e.g. 'Verdict:'")
    return value


#: a review reply's prefix: a ``ReplyPrefix`` (one line, at most 64 characters) that reads as a verdict
#: once RIGHT or WRONG follows it
VerdictPrefix = Annotated[ReplyPrefix, AfterValidator(check_verdict_prefix)]


def review_outcome(review: Message | None) -> str:
    """What ``review`` did with the proposal, one of ``OUTCOMES`` (None or a silent review: no
    verdict): ``kept`` (RIGHT), ``adopted`` (WRONG with an answer: the reviewer's answer is the
    team's), ``no_answer`` (WRONG without one), ``no_verdict``.

    >>> review_outcome(Message("reviewer_0", "reviewer", 1, "review", "Verdict: WRONG. 3 + 4 = 7", answer="7"))
    'adopted'
    >>> review_outcome(Message("reviewer_0", "reviewer", 1, "review", "Verdict: WRONG"))
    'no_answer'
    """
    verdict = parse_verdict(review.text) if review is not None and review.spoke else None
    if verdict is None:
        return "no_verdict"
    if verdict == "RIGHT":
        return "kept"
    return "adopted" if review.answer is not None else "no_answer"

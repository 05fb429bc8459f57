"""Helpers shared by the answer extractors.

Extractors only look at the last ``TAIL_CHARS`` characters of a completion. Why: the final answer
is stated at the end (every task's ``answer_instruction`` asks for that), and the cap bounds the
work per call whatever the model wrote, so a 1 MB completion costs the same as a 10 kB one. 10,000
characters is about 2,500 tokens of closing text, more than any conclusion needs; an answer stated
earlier and never repeated is treated as no answer.
"""

from __future__ import annotations

import re

TAIL_CHARS = 10_000

#: spellings of a minus sign models emit besides ASCII "-" (unicode minus, en dash)
_MINUS_SIGNS = str.maketrans({"\u2212": "-", "\u2013": "-"})

#: "the answer is", "final answer:", "Answer =" (any case); the answer follows the match
ANSWER_IS = re.compile(r"answer\s*(?:is\b|:|=)", re.IGNORECASE)


def tail(text: object) -> str:
    """The last ``TAIL_CHARS`` characters of ``text`` with unicode minus signs made ASCII.

    Anything that is not a ``str`` (``None``, bytes) yields ``""`` so that extractors never raise.

    >>> tail("x = \u22123")
    'x = -3'
    >>> tail(None)
    ''
    """
    if not isinstance(text, str):
        return ""
    return text[-TAIL_CHARS:].translate(_MINUS_SIGNS)

"""Multiple-choice answers (GPQA): the letter A-D a completion commits to.

Two tiers; the last match of the highest tier present wins:

1. explicit statements: ``\\boxed{B}``, "the answer is B", "Answer: (B)", "answer is **B**",
   "correct answer is option B";
2. letter marks standing on their own: ``(B)``, ``**B**`` anywhere, and a line that holds nothing
   but the letter (``B``, ``B.``, ``B)``).

Only capital letters count, and a letter must be a word of its own: "A train leaves..." has no
answer, nor does "the answer is a bit subtle" or "the answer is A train". After "answer is" a bare
letter must be followed by punctuation, the end of the line, or a word such as "because".
"""

from __future__ import annotations

import re

from teamplay.envs.tasks.answers.latex import last_boxed
from teamplay.envs.tasks.answers.text import tail

LETTERS = "ABCD"

# Every quantifier is bounded, so a long run of spaces or stars cannot make the regex backtrack
# more than a few hundred steps per "answer": matching stays linear in the text length.
_STATEMENT = re.compile(
    r"(?i:answer)(?:\s{1,20}(?i:is)\b|\s{0,20}[:=])?[\s:*]{0,20}(?:(?i:option|choice)\s{1,20})?"
    r"(?:\(([A-D])\)|\*\*\(?([A-D])\)?\*\*"
    # a bare letter: not part of a word, and not followed by a lowercase word ("A train")
    # unless that word explains the choice ("B because ...")
    r"|([A-D])(?![\w'])(?!\s{1,20}(?!(?:because|since|as|which)\b)[a-z]))"
)
_MARK = re.compile(r"\(([A-D])\)|\*\*\(?([A-D])\)?\*\*")
_LONE_LINE = re.compile(r"^[ \t*]*\(?([A-D])[).:]?[ \t*]*$", re.MULTILINE)
_BOXED_LETTER = re.compile(r"^(?:\\text\{)?\s*\(?([A-D])\)?(?![A-Za-z])")


def _letter(match: re.Match[str]) -> str:
    return next(g for g in match.groups() if g)  # exactly one alternative's group matched


def extract_letter(completion: object) -> str | None:
    """The chosen letter A-D of ``completion`` by the rule above, or ``None``.

    >>> extract_letter("A train leaves at 3pm... so the answer is (C).")
    'C'
    >>> extract_letter("Options (A) and (B) look close; **B** fits better.")
    'B'
    >>> extract_letter("A train leaves at 3pm.") is None
    True
    """
    text = tail(completion)
    if not text:
        return None
    explicit = [(m.start(), _letter(m)) for m in _STATEMENT.finditer(text)]
    boxed = last_boxed(text)
    if boxed is not None:
        inner = _BOXED_LETTER.match(boxed)
        if inner:
            # last_boxed read the last box, so the last "\\boxed"/"\\fbox" is where it stands
            explicit.append((max(text.rfind("\\boxed"), text.rfind("\\fbox")), inner.group(1)))
    if explicit:
        return max(explicit)[1]
    marks = [(m.start(), _letter(m)) for m in _MARK.finditer(text)]
    marks += [(m.start(), m.group(1)) for m in _LONE_LINE.finditer(text)]
    return max(marks)[1] if marks else None

"""Numeric final answers (GSM8K, arith): find the number a completion commits to, compare exactly.

Which number wins when several appear, highest priority first (the last match of that kind):

1. ``#### N``: GSM8K's own answer marker (the reference solutions end with it);
2. ``\\boxed{...}``: the last number inside the last box (``\\boxed{2 \\times 9 = 18}`` gives 18);
3. an answer statement: the first number after the last "answer is" / "answer:" / "answer ="
   on the same line ("The final answer is: $1,000." gives 1000);
4. the last number anywhere in the text.

What a number may look like: ``1,000`` (thousands separators), ``$18`` and ``18%`` (the unit is
dropped: GSM8K references are bare numbers, also for "what percent" questions), ``18.00``, ``-3``
(a minus counts only where it cannot be a subtraction: "16-3" is 16 and 3), ``1/2`` and
``\\frac{1}{2}`` (an exact fraction, equal to ``0.5``). Numbers longer than 100 digits are ignored
(no answer is that long, and converting them is slow). Values compare exactly as fractions:
``18.0 == 18`` but ``0.333 != 1/3``.
"""

from __future__ import annotations

import re
from fractions import Fraction

from teamplay.envs.tasks.latex import last_boxed
from teamplay.envs.tasks.text import ANSWER_IS, tail

_MAX_DIGITS = 100
# A number not glued to a preceding word, digit or decimal point. Every repetition is bounded and
# followed by a "no more digits" lookahead, so the regex cannot backtrack more than 100 steps at a
# start position: matching is linear in the text length.
_NUMBER = re.compile(
    r"(?<![\w.])(-)?\$?"                                  # sign only where it cannot be "a - b"
    r"([0-9]{1,3}(?:,[0-9]{3}){1,33}(?![0-9])|[0-9]{1,100}(?![0-9]))"  # 1,000,000 or 1000000
    r"(\.[0-9]{1,100}(?![0-9]))?"                           # decimals
    r"(?:\s*/\s*([0-9]{1,100})(?![0-9.]))?"                 # a fraction 1/2
)
_FRAC = re.compile(r"\\[dt]?frac\{\s*(-?[0-9.,]+)\s*\}\{\s*([0-9.,]+)\s*\}")
_HASHES = re.compile(r"####")
_LINE_END = re.compile(r"\n")


def _value(match: re.Match[str]) -> Fraction | None:
    sign, integer, decimals, denominator = match.groups()
    try:
        value = Fraction(integer.replace(",", "") + (decimals or ""))
        if denominator is not None:
            value /= int(denominator)
    except (ValueError, ZeroDivisionError):
        return None
    return -value if sign else value


def _numbers(text: str) -> list[Fraction]:
    text = _FRAC.sub(r"\1/\2", text)
    values = (_value(m) for m in _NUMBER.finditer(text))
    return [v for v in values if v is not None]


def _line_after(text: str, pos: int) -> str:
    end = _LINE_END.search(text, pos)
    return text[pos:end.start() if end else len(text)]


def extract_number(completion: object) -> Fraction | None:
    """The final numeric answer of ``completion`` by the priority rule above, or ``None``.

    >>> extract_number("16 - 3 - 4 = 9 eggs, 9 * 2 = $18\\n#### 18")
    Fraction(18, 1)
    >>> extract_number("It is \\\\boxed{1,000} dollars, not 7.")
    Fraction(1000, 1)
    >>> extract_number("The answer is -2.50. Check: 3 + 4 = 7")
    Fraction(-5, 2)
    >>> extract_number("no digits here") is None
    True
    """
    text = tail(completion)
    if not text:
        return None
    hashes = list(_HASHES.finditer(text))
    if hashes:
        found = _numbers(_line_after(text, hashes[-1].end()))
        if found:
            return found[0]
    boxed = last_boxed(text)
    if boxed is not None:
        found = _numbers(boxed)
        if found:
            return found[-1]
    statements = list(ANSWER_IS.finditer(text))
    if statements:
        found = _numbers(_line_after(text, statements[-1].end()))
        if found:
            return found[0]
    found = _numbers(text)
    return found[-1] if found else None


def canonical_number(value: Fraction) -> str:
    """The canonical spelling of a value: ``"1000"``, ``"-3"``, ``"2.5"``; ``"1/3"`` if not a finite decimal.

    >>> [canonical_number(Fraction(x)) for x in ("1000", "-3", "5/2", "1/3")]
    ['1000', '-3', '2.5', '1/3']
    """
    if value.denominator == 1:
        return str(value.numerator)
    denominator = value.denominator
    for prime in (2, 5):
        while denominator % prime == 0:
            denominator //= prime
    if denominator != 1:
        return f"{value.numerator}/{value.denominator}"
    # a finite decimal: scale by 10**k until integral, then place the point
    k = 0
    scaled = value
    while scaled.denominator != 1:
        scaled *= 10
        k += 1
    digits = str(abs(scaled.numerator)).rjust(k + 1, "0")
    return ("-" if value < 0 else "") + digits[:-k] + "." + digits[-k:]


def extract_canonical(completion: object) -> str | None:
    """``extract_number`` in canonical spelling (what ``Task.extract`` returns for numeric tasks)."""
    value = extract_number(completion)
    return None if value is None else canonical_number(value)


def parse_canonical(answer: object) -> Fraction | None:
    """The value of one answer string such as ``"1,000"``, ``"$18"``, ``"2.5"``, ``"1/2"``.

    Unlike ``extract_number`` this reads a short answer, not a completion: the last number of the
    string counts (so an already extracted answer maps to itself).

    >>> parse_canonical("$1,000.00")
    Fraction(1000, 1)
    """
    if not isinstance(answer, str):
        return None
    found = _numbers(tail(answer))
    return found[-1] if found else None


def numbers_equal(answer: object, reference: object) -> float:
    """1.0 if both strings hold the same number (exactly), else 0.0. Never raises.

    >>> numbers_equal("18.00", "18"), numbers_equal("1/2", "0.5"), numbers_equal("17", "18")
    (1.0, 1.0, 0.0)
    >>> numbers_equal(None, "18")
    0.0
    """
    a, b = parse_canonical(answer), parse_canonical(reference)
    return 1.0 if a is not None and b is not None and a == b else 0.0

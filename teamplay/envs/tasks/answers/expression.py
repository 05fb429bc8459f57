"""Exact values of the arithmetic expressions a numeric final answer is written as.

A final answer is the whole final expression, never its first or last number: ``3/4`` is 0.75,
``2^{10}`` is 1024, ``12 1/2`` is 12.5, ``1.5 \\times 10^3`` is 1500. This module turns a piece of
text (a box's content, the rest of an answer statement, the end of a completion) into tokens and
evaluates the expressions in them exactly, as ``Fraction``s. What it cannot evaluate exactly (a
square root, ``2\\pi``, a power too large to compute, a malformed digit grouping such as ``1,00``)
is ``INVALID``: judged wrong by the caller, never cut down to a number it contains.

Pipeline: ``clean`` (LaTeX and markup to plain arithmetic) -> ``tokenize`` -> ``Parser.chain`` (an
expression, or an equality chain ``2 * 9 = 18`` whose value is its last side).

Accepted number spellings: ``1000``, ``1,000`` / ``1 000`` / ``1\\,000`` / ``1{,}000`` (thousands
groups of exactly three digits; a thin or no-break space counts as a space), ``2.50``, ``.75``,
``1.5e3``, ``12 1/2`` (a mixed number: whole part plus a proper fraction), non-ASCII decimal digits
(``١٨``, ``１８``) and superscript powers (``10³``). Currency (``$``, ``\\$``), percent signs and
markdown emphasis are dropped: GSM8K references are bare numbers.

Cost: linear in the text (every regex repetition is bounded), recursion depth capped at
``MAX_DEPTH`` nested parentheses, powers capped at ``MAX_POWER_BITS`` bits of result.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction
from typing import Final

#: an expression that is there but cannot be evaluated exactly (judged wrong, never cut)
INVALID: Final = "invalid"
Value = Fraction | str  # a Fraction, or INVALID

MAX_DEPTH = 40
MAX_POWER_BITS = 100_000  # about 30,000 decimal digits: far beyond any answer, cheap to compute

# -- cleaning: LaTeX and markup to plain arithmetic -------------------------------------------------

_UNICODE_DIGIT = re.compile(r"(?![0-9])\d")  # \d is every unicode decimal digit in a str pattern
_SUPERSCRIPT = re.compile("[\u2070\u00b9\u00b2\u00b3\u2074-\u2079]{1,20}")
_SUPERSCRIPT_DIGITS = str.maketrans("\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079", "0123456789")
_TEXT_WRAPPER = re.compile(r"\\(?:text|textbf|textit|textrm|mathrm|mathbf|mbox|operatorname)\s*\{([^{}]{0,200})\}")
_LATEX_MIXED = re.compile(r"(?<![\w.])([0-9]{1,9})\s*\\[dt]?frac\s*\{\s*([0-9]{1,9})\s*\}\s*\{\s*([0-9]{1,9})\s*\}")
_LATEX_FRAC = re.compile(r"\\[dt]?frac\s*\{([^{}]{0,200})\}\s*\{([^{}]{0,200})\}")
_LATEX_FRAC_SHORT = re.compile(r"\\[dt]?frac\s*([0-9])\s*([0-9])")
_TIMES = re.compile(r"\\times(?![A-Za-z])|\\cdot(?![A-Za-z])|[\u00d7\u00b7\u22c5\u2219]")
_DIVIDE = re.compile(r"\\div(?![A-Za-z])|\u00f7")
_LETTER_TIMES = re.compile(r"(?<=[0-9)])[ \t]{0,3}[xX][ \t]{0,3}(?=[0-9(])")  # "9 x 2"
_DOUBLE_STAR_POWER = re.compile(r"(?<=[0-9)])\*\*(?=[0-9(])")                # "2**3"
_DROPPED = re.compile(r"\\left(?![A-Za-z])|\\right(?![A-Za-z])|\\[!$%]|\\displaystyle|[$%]|\*\*|__")
_THIN_SPACE = re.compile(r"\\[,;:]|\\ ")
_CALCULATOR = re.compile(r"<<[^<>\n]{0,200}>>")  # GSM8K's calculator annotations: <<9*2=18>>
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|\u00b0")  # 90^\circ, 90°: a unit


def _star(match: re.Match[str]) -> str:
    """A single ``*`` multiplies only between two operands; elsewhere it is markdown emphasis."""
    text, i = match.string, match.start()
    before = text[max(0, i - 4):i].rstrip(" \t")[-1:]  # a few characters: O(1) per star
    after = text[i + 1:i + 5].lstrip(" \t")[:1]
    return "*" if before and (before.isdigit() or before == ")") and after and (after.isdigit() or after in "(.") \
        else ""


def clean(text: str) -> str:
    """Plain arithmetic from LaTeX/markdown answer text; numbers keep their positions' order.

    >>> clean(r"**\\$1{,}234** or $\\dfrac{3}{4}$, 2\\frac{1}{2}, 10^{3} \\times 2, 5\u00b2")
    '1,234 or ((3)/(4)), 2 1/2, 10^(3) * 2, 5^(2)'
    """
    text = _UNICODE_DIGIT.sub(lambda m: str(unicodedata.decimal(m.group(), 0)), text)
    text = _SUPERSCRIPT.sub(lambda m: "^(" + m.group().translate(_SUPERSCRIPT_DIGITS) + ")", text)
    text = _CALCULATOR.sub(" ", text)
    text = _DEGREES.sub(" ", text)
    text = text.replace("{,}", ",")
    text = _THIN_SPACE.sub("\u2009", text)
    for _ in range(3):  # nested wrappers such as \text{\textbf{18}}
        text = _TEXT_WRAPPER.sub(r"\1", text)
    text = _LATEX_MIXED.sub(r"\1 \2/\3", text)
    for _ in range(MAX_DEPTH):  # innermost fractions first: each pass removes one nesting level
        replaced = _LATEX_FRAC.sub(r"((\1)/(\2))", text)
        if replaced == text:
            break
        text = replaced
    text = _LATEX_FRAC_SHORT.sub(r"((\1)/(\2))", text)
    text = text.replace("{", "(").replace("}", ")")
    text = _TIMES.sub("*", text)
    text = _DIVIDE.sub("/", text)
    text = _DOUBLE_STAR_POWER.sub("^", text)
    text = _DROPPED.sub("", text)
    text = re.sub(r"\*", _star, text)
    return _LETTER_TIMES.sub("*", text)


# -- tokens -------------------------------------------------------------------------------------------

_MIXED = r"(?P<whole>[0-9]{1,9})[ \t]{1,3}(?P<num>[0-9]{1,9})[ \t]{0,3}/[ \t]{0,3}(?P<den>[0-9]{1,9})(?![0-9.])"
_PLAIN = (
    r"(?:(?P<int>[0-9]{1,3}(?:(?P<sep>[,\u2009\u202f\u00a0 ])[0-9]{3}(?![0-9]))(?:(?P=sep)[0-9]{3}(?![0-9])){0,32}"
    r"(?!-[A-Za-z])"                                    # "5 100-dollar bills" is not 5100
    r"|[0-9]{1,100}(?![0-9]))(?P<dec>\.[0-9]{1,100}(?![0-9]))?"
    r"|(?P<dot>\.[0-9]{1,100}(?![0-9])))"                 # .75
    r"(?P<exp>[eE][+-]?[0-9]{1,4}(?![0-9A-Za-z]))?"     # 1.5e3
)
# A number not glued to a preceding word character or decimal point. Every repetition is bounded and
# followed by a "no more digits" lookahead, so matching is linear in the text length.
_NUMBER = re.compile(r"(?<![\w.])(?:" + _MIXED + "|" + _PLAIN + ")")
_PLAIN_NUMBER = re.compile(r"(?<![\w.])" + _PLAIN)
_OTHER_TOKEN = re.compile(
    r"(?P<op>[-+*/^=()])"
    r"|(?P<space>[ \t\u2009\u202f\u00a0]{1,100})"
    r"|(?P<command>\\[A-Za-z]{1,30})"
    r"|(?P<word>[^\W\d_]{1,50})"
    # characters no rule looks at (NUL, emoji, brackets, quotes) come in runs: one token per run
    r"|(?P<other>[^\w\s.,!?:;()+\-*/^=\\\u221a\u03c0\u00b1<>\u2248\u2264\u2265%$]{1,200}|.)",
    re.DOTALL,
)
# after a number: its grouping or decimals go on where a number cannot ("1,00", "12,34", "1.2.3")
_BROKEN_TAIL = re.compile(r"[,.][0-9]")
_BROKEN_HEAD = re.compile(r"[0-9],")


@dataclass(frozen=True)
class Token:
    """One token: ``kind`` is number, op, space, command, word or other; ``value`` for numbers."""

    kind: str
    text: str
    start: int
    end: int
    value: Value | None = None


def _number_value(match: re.Match[str]) -> Value:
    g = match.groupdict()
    try:
        if g.get("whole") is not None:
            value = int(g["whole"]) + Fraction(int(g["num"]), int(g["den"]))
        else:
            digits = g["dot"] if g["dot"] is not None else re.sub(r"[^0-9]", "", g["int"]) + (g["dec"] or "")
            value = Fraction(digits)
        if g["exp"] is not None:
            exponent = int(g["exp"][1:])
            if abs(exponent) > 400:
                return INVALID
            value *= Fraction(10) ** exponent
    except (ValueError, ZeroDivisionError):
        return INVALID
    return value


def tokenize(text: str) -> list[Token]:
    """Tokens of already ``clean``ed text. A digit glued to a word (``x2``) is not a number; a
    number whose digit grouping is malformed (``1,00``, ``12,34``, ``1.2.3``) has the value
    ``INVALID``. ``12 1/2`` is one number only when the fraction is proper (``3 4/2`` is two)."""
    tokens: list[Token] = []
    pos = 0
    while pos < len(text):
        number = _NUMBER.match(text, pos)
        if number is not None and number.group("whole") is not None \
                and not 0 < int(number.group("num")) < int(number.group("den")):
            number = _PLAIN_NUMBER.match(text, pos)
        if number is not None:
            value = _number_value(number)
            end = number.end()
            if _BROKEN_TAIL.match(text, end) or (pos >= 2 and _BROKEN_HEAD.match(text, pos - 2)):
                value = INVALID
            tokens.append(Token("number", number.group(), pos, end, value))
            pos = end
            continue
        match = _OTHER_TOKEN.match(text, pos)
        assert match is not None  # the last alternative matches any character
        tokens.append(Token(match.lastgroup or "other", match.group(), pos, match.end()))
        pos = match.end()
    return tokens


# -- parsing and exact evaluation ----------------------------------------------------------------------

class NoExpression(Exception):
    """No expression starts at this position (the caller backtracks or tries the next one)."""


def _power(base: Value, exponent: Value) -> Value:
    if base == INVALID or exponent == INVALID:
        return INVALID
    assert isinstance(base, Fraction) and isinstance(exponent, Fraction)
    if exponent.denominator != 1:  # 4^(1/2) is a root: not evaluated exactly here
        return INVALID
    e = abs(exponent.numerator)
    size = max(abs(base.numerator), base.denominator).bit_length()
    if e > MAX_POWER_BITS or size * e > MAX_POWER_BITS:
        return INVALID
    if base == 0 and exponent < 0:
        return INVALID
    return base ** exponent.numerator


def _binary(op: str, a: Value, b: Value) -> Value:
    if a == INVALID or b == INVALID:
        return INVALID
    assert isinstance(a, Fraction) and isinstance(b, Fraction)
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if b == 0:
        return INVALID
    return a / b


class Parser:
    """Recursive-descent parser over the significant tokens (spaces dropped) of one text.

    Grammar (``^`` binds tightest and is right-associative; no implicit multiplication)::

        chain   := expr ('=' expr)*
        expr    := term (('+' | '-') term)*
        term    := unary (('*' | '/') unary)*
        unary   := ('-' | '+') unary | power
        power   := primary ('^' unary)?
        primary := number | '(' expr ')'

    A binary operator whose right side does not parse ends the expression before it (``2 +.``
    is 2).
    """

    def __init__(self, tokens: list[Token]) -> None:
        self.tokens = [t for t in tokens if t.kind != "space"]
        self.pos = 0
        self.depth = 0

    def _peek(self) -> Token | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def _is_op(self, chars: str) -> bool:
        tok = self._peek()
        return tok is not None and tok.kind == "op" and tok.text in chars

    def chain(self, start: int) -> tuple[Value, int, int]:
        """Parse an equality chain at token ``start``: (value of its last side, first token, end
        token). Raises ``NoExpression`` when no expression starts there."""
        self.pos = start
        value = self._expr()
        while self._is_op("="):
            try:
                value = self._after_token(self._expr)
            except NoExpression:
                break
        return value, start, self.pos

    def _binary_loop(self, ops: str, operand) -> Value:
        value = operand()
        while self._is_op(ops):
            op = self.tokens[self.pos].text
            try:
                right = self._after_token(operand)
            except NoExpression:
                break
            value = _binary(op, value, right)
        return value

    def _expr(self) -> Value:
        return self._binary_loop("+-", self._term)

    def _term(self) -> Value:
        return self._binary_loop("*/", self._unary)

    def _unary(self) -> Value:
        if self._is_op("-+"):
            sign = self.tokens[self.pos].text
            with self._nested():
                value = self._after_token(self._unary)
            return -value if sign == "-" and value != INVALID else value  # type: ignore[operator]
        return self._power()

    def _power(self) -> Value:
        base = self._primary()
        if self._is_op("^"):
            with self._nested():
                try:
                    exponent = self._after_token(self._unary)
                except NoExpression:
                    return INVALID  # "2^" then nothing: a power we cannot read is not its base
            return _power(base, exponent)
        return base

    def _primary(self) -> Value:
        tok = self._peek()
        if tok is None:
            raise NoExpression
        if tok.kind == "number":
            self.pos += 1
            return tok.value  # type: ignore[return-value]
        if tok.kind == "op" and tok.text == "(":
            saved = self.pos
            with self._nested():
                value = self._after_token(self._expr)
            if not self._is_op(")"):
                self.pos = saved
                raise NoExpression
            self.pos += 1
            return value
        raise NoExpression

    def _after_token(self, parse: Callable[[], Value]) -> Value:
        """``parse()`` from the token after the current one (an operator or an opening
        parenthesis); when it raises ``NoExpression`` the position is back on that token (so a
        caller can stop before it) and the error propagates."""
        saved = self.pos
        self.pos += 1
        try:
            return parse()
        except NoExpression:
            self.pos = saved
            raise

    @contextmanager
    def _nested(self) -> Iterator[None]:
        """One nesting level deeper for the body of the ``with`` (a sign's operand, an exponent, a
        parenthesis); the level is left however the body ends. ``NoExpression`` before the body
        runs when ``MAX_DEPTH`` levels are already open."""
        if self.depth >= MAX_DEPTH:
            raise NoExpression
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1

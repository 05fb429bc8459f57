"""Numeric final answers (GSM8K, arith): find the value a completion commits to, compare exactly.

Where the final answer is, highest priority first (the last marker of that kind):

1. ``#### N``: GSM8K's own answer marker (the reference solutions end with it), to the line end;
2. ``\\boxed{...}``: the last box;
3. an answer statement: after the last "answer is" / "answer:" / "answer =" to the end of that
   sentence ("The final answer is: $1,000." and minerva's "The final answer is $X$. I hope it is
   correct." give 1000 and X; "Final answer: X" and "Answer: X" too);
4. otherwise the last expression anywhere in the text.

A marker whose span holds no number falls through to the next one.

What the answer is: the WHOLE final expression, evaluated exactly (``teamplay.envs.tasks.answers.expression``):
``3/4`` and ``\\frac{3}{4}`` are 0.75 (also before a sentence's period), ``2^{10}`` is 1024,
``12 1/2`` is 12.5, ``.75`` is 0.75, ``1.5 \\times 10^3`` is 1500, ``1 234`` and ``1,234`` are 1234,
and an equality chain ``2 \\times 9 = 18`` is its last side. In a marked span the first expression
is the answer. Legitimate decoration stays right: thousands separators, currency, units, percent
(dropped: GSM8K references are bare numbers), bold, scientific notation, non-ASCII digits.

What is judged wrong (``None``), never cut down to a number it contains (these were reward-hacking
routes when the extractor took the leading number of a longer expression):

* an expression that cannot be evaluated exactly: ``\\sqrt{4}``, ``2\\pi``, ``3:4``, ``2(3)``,
  ``5!``, a power beyond ``MAX_POWER_BITS``, a malformed grouping (``1,00``, ``12,34``, ``1.2.3``);
* a hedge: after the answer, in its span, another value offered as an alternative ("3 or 4",
  "3, 4", "3 and 4", "18 (or 17)", "5 \\pm 2", "between 3 and 5"). A number that is explained or
  rejected ("18, since 9 * 2 = 18", "6, not 7") is not a hedge. Without a marker, a final
  expression preceded in its sentence by another value and "or"/"maybe"/... is a hedge too.

Values compare exactly as fractions: ``18.0 == 18`` but ``0.333 != 1/3``.
"""

from __future__ import annotations

import re
from fractions import Fraction

from teamplay.envs.tasks.answers.expression import INVALID, NoExpression, Parser, Token, Value, clean, tokenize
from teamplay.envs.tasks.answers.latex import last_boxed
from teamplay.envs.tasks.answers.text import ANSWER_IS, tail

_HASHES = re.compile(r"####")
#: the longest marked span read (a statement's sentence, a box, a "####" line): its first
#: expression is at its start, so a longer span only loses hedge checks past this point
MAX_SPAN_CHARS = 1000
#: without a marker, the final expression and its sentence are looked for in this many characters
#: before the last digit: the work per call stays bounded whatever the completion holds
FALLBACK_WINDOW_CHARS = 2000
_LAST_DIGIT = re.compile(r"\d(?=\D*$)")
_LINE_END = re.compile(r"\n")
# the end of an answer statement's sentence: a period not starting decimals, "!" or "?", a newline
_SENTENCE_END = re.compile(r"\.(?![0-9])(?=[\s$*)}\]]|$)|[!?](?=\s*$|\s+[A-Z])|\n")

# commands and words that act on an adjacent number: "\sqrt 4", "2\pi", "5 \pm 2" cannot be cut to 4, 2, 5
_OPERATOR_COMMANDS = frozenset({
    "sqrt", "pi", "log", "ln", "lg", "sin", "cos", "tan", "cot", "sec", "csc", "exp", "binom", "choose",
    "pm", "mp", "infty", "overline", "bar", "root", "sum", "prod", "int", "lim", "arcsin", "arccos",
    "arctan", "sinh", "cosh", "tanh", "ldots", "dots", "cdots", "mod", "bmod", "pmod", "equiv", "neq",
    "approx", "sim", "leq", "geq", "le", "ge", "lt", "gt", "in", "cup", "cap", "vec", "hat",
})
_BEFORE_CHARS = frozenset("\u221a\u03c0\u00b1<>\u2248\u2264\u2265")  # √ π ± < > ≈ ≤ ≥ before a number
_AFTER_CHARS = frozenset("\u221a\u03c0!:")  # 2√2, 2π, 5!, 3:4 right after a number
_FUNCTION_WORDS = frozenset({"sqrt", "log", "ln", "sin", "cos", "tan", "exp", "pi"})

_NEGATION = re.compile(r"\b(?:not|never|rather than|instead of|isn'?t|wasn'?t|incorrect|wrong|since|because|"
                       r"as|from|per|of|each|for|with|times|equals?|is|are|was|i\.e|that|which|so)\b")
_HEDGE_WORD = re.compile(r"\b(?:or|either|maybe|perhaps|possibly|between)\b|\u00b1|\\pm|\+/-|\+-")
_LIST_GAP = re.compile(r"[\s()*]*(?:[,;&|]|and|to|or|&)?[\s()*]*(?:or|and)?[\s()*]*")


def _glued(cleaned: str, left: Token, right: Token) -> bool:
    """True when only spaces (no newline) separate two tokens."""
    return cleaned[left.end:right.start].strip(" \t\u2009\u202f\u00a0") == ""


def _acts_on_number(cleaned: str, tokens: list[Token], start: int, end: int) -> bool:
    """Does an operator we cannot evaluate touch the expression tokens[start:end]?"""
    first, last = tokens[start], tokens[end - 1]
    if start > 0:
        before = tokens[start - 1]
        if before.kind == "command" and before.text[1:] in _OPERATOR_COMMANDS and _glued(cleaned, before, first):
            return True
        if before.kind == "other" and before.text in _BEFORE_CHARS and _glued(cleaned, before, first):
            return True
        if before.kind == "word" and before.end == first.start and (first.text == "(" or
                                                                    before.text.lower() in _FUNCTION_WORDS):
            return True  # sqrt(4), log(8), x(3)
        if before.kind == "op" and before.text == "^" and before.end == first.start:
            return True  # x^2: the exponent of a power whose base is not a number
    if end < len(tokens):
        after = tokens[end]
        if after.kind == "command" and after.text[1:] in _OPERATOR_COMMANDS and _glued(cleaned, last, after):
            return True
        if after.kind == "other" and after.text in _AFTER_CHARS and last.end == after.start:
            return True  # 5!, 3:4, 2√2
        if after.kind == "word" and last.end == after.start and after.text.lower() in ("π", "pi", "sqrt"):
            return True
        if after.kind == "op" and after.text in "(^" and last.end == after.start:
            return True  # 2(3): no implicit multiplication; 2^ with an exponent we could not read
    return False


def _chain_at(parser: Parser, index: int) -> tuple[Value, int, int] | None:
    """The chain containing the number token at ``index``, started as early as a sign or an opening
    parenthesis right before it allows; ``None`` if nothing parses (cannot happen at a number)."""
    tokens = parser.tokens
    start = index
    while start > 0 and tokens[start - 1].kind == "op" and tokens[start - 1].text in "(-+":
        start -= 1
    for s in range(start, index + 1):
        try:
            return parser.chain(s)
        except NoExpression:  # try one token later
            continue
    return None


def _is_hedge(gap: str) -> bool:
    gap = gap.lower()
    if _HEDGE_WORD.search(gap) and not re.search(r"\b(?:not|rather than|instead of)\b", gap):
        return True
    return not _NEGATION.search(gap) and _LIST_GAP.fullmatch(gap) is not None


def _first_answer(text: str) -> Value | None:
    """The first expression of a marked span, checked for hedges; ``None`` if the span has no number."""
    cleaned = clean(text)
    parser = Parser(tokenize(cleaned))
    tokens = parser.tokens
    numbers = [i for i, t in enumerate(tokens) if t.kind == "number"]
    if not numbers:
        return None
    found = _chain_at(parser, numbers[0])
    if found is None:
        return INVALID
    value, start, end = found
    if value == INVALID or _acts_on_number(cleaned, tokens, start, end):
        return INVALID
    previous_end = tokens[end - 1].end
    for index in numbers:
        if index < end:
            continue
        other = _chain_at(parser, index)
        if other is None:
            continue
        other_value, other_start, other_end = other
        if other_start < end:
            continue
        if other_value != value and _is_hedge(cleaned[previous_end:tokens[other_start].start]):
            return INVALID
        previous_end, end = tokens[other_end - 1].end, other_end
    return value


def _last_expression(text: str) -> Value | None:
    """The last expression of unmarked text (an equality chain counts its last side)."""
    cleaned = clean(text)
    parser = Parser(tokenize(cleaned))
    tokens = parser.tokens
    last = next((i for i in range(len(tokens) - 1, -1, -1) if tokens[i].kind == "number"), None)
    if last is None:
        return None
    run = last
    while run > 0 and tokens[run - 1].kind in ("number", "op"):
        run -= 1
    found = None
    i = run
    while i <= last:
        if tokens[i].kind == "number" or tokens[i].text in "(-+":
            try:
                found = parser.chain(i)
                i = max(found[2], i + 1)
                continue
            except NoExpression:
                pass
        i += 1
    if found is None:
        return INVALID
    value, start, end = found
    if value == INVALID or _acts_on_number(cleaned, tokens, start, end):
        return INVALID
    # "It is 3 or 4.": a different value earlier in the same sentence, offered as an alternative
    for j in range(start - 1, -1, -1):
        tok = tokens[j]
        sentence_end = tok.text == "\n" or (tok.text in ".!?" and not cleaned[tok.end:tok.end + 1].isdigit())
        if tok.kind == "other" and sentence_end:
            break
        if tok.kind == "number":
            gap = cleaned[tok.end:tokens[start].start].lower()
            earlier = _chain_at(parser, j)  # with its sign: "-1 or 1" offers two values
            if earlier is not None and earlier[0] != value and _HEDGE_WORD.search(gap) \
                    and not re.search(r"\bnot\b", gap):
                return INVALID
            break
    return value


def _line_after(text: str, pos: int) -> str:
    end = _LINE_END.search(text, pos)
    return text[pos:end.start() if end else len(text)][:MAX_SPAN_CHARS]


def _sentence_after(text: str, pos: int) -> str:
    end = _SENTENCE_END.search(text, pos)
    return text[pos:end.start() if end else len(text)][:MAX_SPAN_CHARS]


def _final_value(text: str) -> Fraction | None:
    hashes = list(_HASHES.finditer(text))
    spans = []
    if hashes:
        spans.append(_line_after(text, hashes[-1].end()))
    boxed = last_boxed(text)
    if boxed is not None:
        spans.append(boxed[:MAX_SPAN_CHARS])
    statements = list(ANSWER_IS.finditer(text))
    if statements:
        spans.append(_sentence_after(text, statements[-1].end()))
    for span in spans:
        value = _first_answer(span)
        if value is not None:
            return value if isinstance(value, Fraction) else None
    last_digit = _LAST_DIGIT.search(text)
    if last_digit is None:
        return None
    value = _last_expression(text[max(0, last_digit.start() - FALLBACK_WINDOW_CHARS):])
    return value if isinstance(value, Fraction) else None


def extract_number(completion: object) -> Fraction | None:
    """The final numeric answer of ``completion`` by the rules above, or ``None`` (no answer, or
    an answer judged wrong whatever the reference). Never raises.

    >>> extract_number("16 - 3 - 4 = 9 eggs, 9 * 2 = $18\\n#### 18")
    Fraction(18, 1)
    >>> extract_number("It is \\\\boxed{1,000} dollars, not 7.")
    Fraction(1000, 1)
    >>> extract_number("The answer is 3/4.")
    Fraction(3, 4)
    >>> extract_number("The answer is 3 or 4.") is None
    True
    """
    text = tail(completion)
    if not text:
        return None
    return _final_value(text)


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
    """The value of one short answer string such as ``"1,000"``, ``"$18"``, ``"2.5"``, ``"1/2"``.

    Unlike ``extract_number`` no answer marker is looked for: the string's last expression is its
    value (so an already extracted answer maps to itself).

    >>> parse_canonical("$1,000.00"), parse_canonical("-7/6")
    (Fraction(1000, 1), Fraction(-7, 6))
    """
    if not isinstance(answer, str):
        return None
    value = _last_expression(tail(answer))
    return value if isinstance(value, Fraction) else None


def numbers_equal(answer: object, reference: object) -> float:
    """1.0 if both strings hold the same number (exactly), else 0.0. Never raises.

    >>> numbers_equal("18.00", "18"), numbers_equal("1/2", "0.5"), numbers_equal("17", "18")
    (1.0, 1.0, 0.0)
    >>> numbers_equal(None, "18")
    0.0
    """
    a, b = parse_canonical(answer), parse_canonical(reference)
    return 1.0 if a is not None and b is not None and a == b else 0.0

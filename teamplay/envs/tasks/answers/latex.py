"""LaTeX answer helpers: the last ``\\boxed{...}`` of a text and a cheap normal form of answers.

Both run in time linear in the length of their input: braces are matched in one pass with a stack,
never by a backtracking regex, so 10,000 nested or unbalanced braces cost milliseconds.
"""

from __future__ import annotations

import re

from teamplay.envs.tasks.answers.text import tail

# "\boxed" and "\fbox" not followed by more letters (so "\boxedfoo" is not a box)
_BOX = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
# a backslash escape (so "\{" and "\}" are literal braces, not groups) or a grouping brace
_BRACE_TOKEN = re.compile(r"\\.|[{}]", re.DOTALL)
# "\boxed 5": the argument is the next token when no brace follows
_BARE_ARGUMENT = re.compile(r"[ \t]+([^\s$]+)")


def matching_braces(text: str) -> dict[int, int]:
    """Map the index of every balanced ``{`` in ``text`` to the index of its ``}``.

    Escaped braces (``\\{``, ``\\}``) are not grouping braces and are skipped; an unmatched brace
    is simply absent from the result.

    >>> matching_braces("a{b{c}}\\\\{")
    {3: 5, 1: 6}
    """
    pairs: dict[int, int] = {}
    stack: list[int] = []
    for token in _BRACE_TOKEN.finditer(text):
        if token.group() == "{":
            stack.append(token.start())
        elif token.group() == "}" and stack:
            pairs[stack.pop()] = token.start()
    return pairs


def last_boxed(text: object) -> str | None:
    """Content of the last complete ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``, stripped.

    Nested braces are kept (``\\boxed{\\frac{1}{2}}`` gives ``\\frac{1}{2}``). A box whose brace is
    never closed (a truncated completion) is skipped in favour of the previous complete one.
    ``\\boxed 5`` (no braces) gives ``5``. Only the last ``TAIL_CHARS`` characters are searched.
    Returns ``None`` when there is no complete box. Never raises.

    >>> last_boxed(r"so \\boxed{1} or rather \\boxed{\\frac{1}{2}}.")
    '\\\\frac{1}{2}'
    >>> last_boxed(r"\\fbox{7} then \\boxed{unclosed")
    '7'
    >>> last_boxed("no box") is None
    True
    """
    text = tail(text)
    boxes = list(_BOX.finditer(text))
    if not boxes:
        return None
    pairs = matching_braces(text)
    for box in reversed(boxes):
        start = box.end()
        while start < len(text) and text[start] in " \t":
            start += 1
        if start < len(text) and text[start] == "{":
            if start in pairs:
                return text[start + 1:pairs[start]].strip()
            continue
        bare = _BARE_ARGUMENT.match(text, box.end())
        if bare:
            return bare.group(1)
    return None


_DELIMITER_SIZING = re.compile(r"\\(?:left|right)(?![A-Za-z])")
_WHITESPACE = re.compile(r"\s+")


def tidy_latex(answer: str) -> str:
    """A conservative canonical spelling that stays valid LaTeX (what ``MathTask.extract`` returns).

    Strips ``$`` delimiters and a trailing period, drops ``\\left``/``\\right``, makes
    ``\\dfrac``/``\\tfrac`` plain ``\\frac`` and collapses whitespace runs to one space, so that
    votes over extracted answers do not split on spelling. Unlike ``normalize_latex`` it never
    joins tokens (``\\pi r`` stays parseable).

    >>> tidy_latex(r" $\\left( 3,  \\dfrac{\\pi}{2} \\right)$. ")
    '( 3, \\\\frac{\\\\pi}{2} )'
    """
    s = answer.strip().strip("$").strip()
    if s.endswith(".") and not s.endswith("..."):
        s = s[:-1]
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = _DELIMITER_SIZING.sub("", s)
    return _WHITESPACE.sub(" ", s).strip().strip("$").strip()


_SPACING = re.compile(r"\\[,;:! ]|\\(?:left|right|displaystyle)(?![A-Za-z])|\s+")
_TEXT_WRAPPER = re.compile(r"\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}")
_DEGREES = re.compile(r"\^\{?\\circ\}?")


def normalize_latex(answer: str) -> str:
    """A cheap canonical spelling of a LaTeX answer, for an exact-match test before math_verify.

    Removes what never changes the value: ``$`` delimiters, spacing commands, ``\\left``/``\\right``,
    whitespace, ``\\text{}`` wrappers (keeping their content), degree marks, ``\\%`` and ``\\$``
    signs and a trailing period; ``\\dfrac``/``\\tfrac`` become ``\\frac``. Two answers with the same
    normal form are equal; different normal forms may still be equal (math_verify decides).

    >>> normalize_latex(r"$\\left( 3, \\dfrac{\\pi}{2} \\right).$")
    '(3,\\\\frac{\\\\pi}{2})'
    >>> normalize_latex(r"90^\\circ") == normalize_latex("90")
    True
    """
    s = answer.strip().strip("$")
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = _TEXT_WRAPPER.sub(r"\1", s)
    s = _DEGREES.sub("", s)
    s = s.replace("\\%", "").replace("\\$", "")
    s = _SPACING.sub("", s)
    return s.rstrip(".").strip("$")

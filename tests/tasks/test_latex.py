"""Boxed-answer extraction and the cheap LaTeX normal form."""

from __future__ import annotations

import time

import pytest

from teamplay.envs.tasks.answers.latex import last_boxed, matching_braces, normalize_latex, tidy_latex
from teamplay.envs.tasks.answers.text import TAIL_CHARS


@pytest.mark.parametrize(("text", "content"), [
    ("\\boxed{5}", "5"),
    ("\\boxed{\\frac{\\sqrt{3}}{2}}", "\\frac{\\sqrt{3}}{2}"),     # nested braces kept
    ("first \\boxed{1}, last \\fbox{2}", "2"),                     # \fbox counts; the last one wins
    ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),                          # escaped braces are literal
    ("\\boxed{3} then \\boxed{4", "3"),                             # an unclosed last box is skipped
    ("\\boxed 7 apples", "7"),                                      # the brace-less form
    ("$\\boxed{ x^{2} }$.", "x^{2}"),
])
def test_last_boxed(text: str, content: str) -> None:
    assert last_boxed(text) == content


@pytest.mark.parametrize("text", ["no box", "\\boxed{", "\\boxedx{1}", "", None, b"\\boxed{1}"])
def test_no_box(text: object) -> None:
    assert last_boxed(text) is None


def test_matching_braces_pairs_and_skips_unmatched() -> None:
    # positions: 0 '{', 1 'a', 2 '{', 3 'b', 4 '}', 5 '}', 6 '}' (unmatched), 7 '{' (unclosed)
    assert matching_braces("{a{b}}}{") == {2: 4, 0: 5}


def test_only_the_tail_is_searched() -> None:
    # the box sits before the last TAIL_CHARS characters, so it is not the final answer
    assert last_boxed("\\boxed{1}" + " " * TAIL_CHARS) is None
    assert last_boxed(" " * (5 * TAIL_CHARS) + "\\boxed{1}") == "1"


def test_deep_nesting_is_linear() -> None:
    deep = "\\boxed{" + "{" * 10_000 + "x" + "}" * 10_000 + "}"
    many = "\\boxed{" * 20_000   # 20k unclosed boxes: one brace pass, not one scan per box
    start = time.perf_counter()
    assert last_boxed(deep[-TAIL_CHARS:]) is None  # the cut removed the opening brace
    assert last_boxed(many) is None
    assert last_boxed("\\boxed{" + "{" * 4000 + "x" + "}" * 4000 + "}") == "{" * 4000 + "x" + "}" * 4000
    assert time.perf_counter() - start < 1.0


@pytest.mark.parametrize(("a", "b"), [
    ("\\dfrac{1}{2}", "\\frac{1}{2}"),
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3,\\frac{\\pi}{2})"),
    ("90^\\circ", "90"),
    ("90^{\\circ}", "90"),
    ("10\\%", "10"),
    ("\\$5", "5"),
    ("\\text{(C)}", "(C)"),
    ("$x + 1$.", "x+1"),
    ("a\\,b\\!c", "abc"),
])
def test_normal_form_merges_equal_spellings(a: str, b: str) -> None:
    assert normalize_latex(a) == normalize_latex(b)


@pytest.mark.parametrize(("a", "b"), [
    ("\\frac{1}{2}", "\\frac{2}{1}"), ("x^2", "x^3"), ("\\rightarrow", "\\ri"), ("-5", "5"),
])
def test_normal_form_keeps_different_answers_apart(a: str, b: str) -> None:
    assert normalize_latex(a) != normalize_latex(b)


@pytest.mark.parametrize(("raw", "tidy"), [
    ("\\dfrac{1}{2}", "\\frac{1}{2}"),
    ("$\\left( 3,  \\frac{\\pi}{2} \\right)$.", "( 3, \\frac{\\pi}{2} )"),
    ("\\pi r^2", "\\pi r^2"),                # tokens are never joined
    ("1, 2, \\ldots", "1, 2, \\ldots"),
    ("x \\rightarrow 0", "x \\rightarrow 0"),  # \\right only as a delimiter command
    ("  $ $ ", ""),
])
def test_tidy_latex(raw: str, tidy: str) -> None:
    assert tidy_latex(raw) == tidy

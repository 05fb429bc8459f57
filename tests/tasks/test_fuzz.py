"""Fuzzing: every extractor and scorer returns quickly and never raises, whatever the text.

Strategies mix arbitrary unicode (NUL bytes and lone surrogates included) with the fragments the
parsers look for, so that the interesting branches (boxes, "answer is", '####', letters) are hit,
not only plain noise. Huge and deeply nested inputs are checked with explicit time limits.
"""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from teamplay.envs.tasks import get_task
from teamplay.records import TaskItem

FRAGMENTS = ["\\boxed{", "\\fbox{", "}", "{", "\\{", "\\}", "####", "The answer is ", "Answer: ", "(B)",
             "**C**", "\n", "$", "-", ",", ".", "/", "%", "1,000", "3.5", "\\frac{1}{2}", "x^2", "A ", "\x00",
             "\\left(", "\\right)", "\\sqrt{", "^{", "9^{9^{9", "\u2212", "\ud800"]
texts = st.lists(st.one_of(st.text(max_size=30), st.sampled_from(FRAGMENTS)), max_size=40).map("".join)

ITEMS = {
    "gsm8k": TaskItem(id="gsm8k/test/0", prompt="q", reference="18"),
    "arith": TaskItem(id="arith/L1/s0/test/0", prompt="q", reference="55"),
    "math": TaskItem(id="math/test/0", prompt="q", reference="\\frac{1}{2}"),
    "math500": TaskItem(id="math500/test/0", prompt="q", reference="(3,\\frac{\\pi}{2})"),
    "gpqa": TaskItem(id="gpqa/test/0", prompt="q", reference="B"),
}
# math calls go to a sympy worker: allow its 3 s deadline per example, on a loaded 2-core machine
FUZZ = settings(max_examples=150, deadline=6000, suppress_health_check=[HealthCheck.too_slow])


def _check(name: str, text: str) -> None:
    task = get_task(name)
    item = ITEMS[name]
    answer = task.extract(text)
    assert answer is None or isinstance(answer, str)
    score = task.score(text, item)
    assert score in (0.0, 1.0)
    assert task.score_answer(answer, item) == score  # score is score_answer of extract


@pytest.mark.parametrize("name", ["gsm8k", "arith", "gpqa"])
@FUZZ
@given(text=texts)
def test_cheap_verifiers_never_raise(name: str, text: str) -> None:
    _check(name, text)


@pytest.mark.parametrize("name", ["math", "math500"])
@settings(max_examples=60, deadline=8000, suppress_health_check=[HealthCheck.too_slow])
@given(text=texts)
def test_math_verifiers_never_raise(name: str, text: str) -> None:
    _check(name, text)


@settings(max_examples=60, deadline=8000, suppress_health_check=[HealthCheck.too_slow])
@given(inner=texts)
def test_math_boxed_arbitrary_content_goes_through_sympy_safely(inner: str) -> None:
    # a complete box guarantees the answer reaches the math_verify worker (unless it is empty,
    # too long, or equal to the reference as a string)
    _check("math", "Thus \\boxed{" + inner.replace("{", "(").replace("}", ")") + "}.")


@pytest.mark.parametrize("name", ["gsm8k", "arith", "gpqa", "math", "math500"])
@settings(max_examples=5, deadline=8000, suppress_health_check=[HealthCheck.too_slow])
@given(fragment=st.sampled_from(FRAGMENTS), repeat=st.integers(min_value=20_000, max_value=200_000))
def test_huge_repetitive_inputs(name: str, fragment: str, repeat: int) -> None:
    _check(name, fragment * repeat)


ADVERSARIAL = [
    "x" * 1_000_000 + "\\boxed{5}",                            # 1 MB of prose then an answer
    "\\boxed{" + "{" * 10_000 + "1" + "}" * 10_000 + "}",       # 10k nested braces
    "\\boxed{" + "{" * 10_000,                                 # 10k unbalanced braces
    "\\boxed{" + "\\frac{" * 3000 + "1" + "}{2}" * 3000 + "}",  # deeply nested LaTeX
    "answer" + " " * 100_000 + "is",                           # backtracking bait for statements
    "1," * 200_000,                                           # backtracking bait for numbers
    "9" * 100_000 + ".",                                      # a number too long to convert
    "\x00" * 100_000,
    "\ud800\udfff" * 50_000,
    "The answer is \\boxed{9^{9^{9^{9^{9}}}}}",               # sympy-hard but short
]


@pytest.mark.parametrize("name", ["gsm8k", "arith", "gpqa", "math", "math500"])
@pytest.mark.parametrize("text", ADVERSARIAL, ids=range(len(ADVERSARIAL)))
def test_adversarial_inputs_return_quickly(name: str, text: str) -> None:
    start = time.monotonic()
    _check(name, text)
    # the math worker's deadline is 3 s; everything else must be far quicker
    assert time.monotonic() - start < (4.5 if name.startswith("math") else 1.0)


@pytest.mark.parametrize("name", ["gsm8k", "arith", "gpqa", "math", "math500"])
@pytest.mark.parametrize("value", [None, b"\\boxed{1}", 17])
def test_non_string_completions_score_zero(name: str, value: object) -> None:
    task = get_task(name)
    assert task.extract(value) is None  # type: ignore[arg-type]
    assert task.score(value, ITEMS[name]) == 0.0  # type: ignore[arg-type]

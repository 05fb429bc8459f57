"""Numeric answers (GSM8K, arith): accepted spellings, canonical form and the priority rule."""

from __future__ import annotations

from fractions import Fraction

import pytest

from teamplay.envs.tasks import get_task
from teamplay.envs.tasks.answers.numeric import canonical_number, extract_canonical, numbers_equal
from teamplay.records import TaskItem


def _item(reference: str) -> TaskItem:
    return TaskItem(id="gsm8k/test/0", prompt="q", reference=reference)


@pytest.mark.parametrize("completion", [
    "18", "1,000 then 18", "$18", "18.00", "\\boxed{18}", "#### 18", "The answer is 18.",
    "The final answer is: $18.", "answer = 18", "\\boxed{\\$18}", "\\boxed{18 \\text{ dollars}}",
    "She makes 9 * 2 = <<9*2=18>>18 dollars.", "**18**", "18%",
])
def test_spellings_of_eighteen_score_one(completion: str) -> None:
    assert get_task("gsm8k").score(completion, _item("18")) == 1.0


@pytest.mark.parametrize(("completion", "expected"), [
    ("1,000", "1000"),
    ("-3", "-3"),
    ("x = -3", "-3"),
    ("16-3", "13"),           # the whole final expression, never its last number
    ("\u22123 degrees", "-3"),  # unicode minus
    ("2.50", "2.5"),
    ("1/2", "0.5"),           # an exact fraction, printed as a finite decimal
    ("\\frac{1}{3}", "1/3"),  # not a finite decimal: kept as a fraction
    ("\\dfrac{-6}{4}", "-1.5"),
    ("12.5%", "12.5"),        # the percent sign is dropped (GSM8K references are bare numbers)
    ("1,234,567.890", "1234567.89"),
    ("0.000", "0"),
    ("1/0", None),            # not a number
    ("no number", None),
    ("", None),
])
def test_extract_canonical(completion: str, expected: str | None) -> None:
    assert extract_canonical(completion) == expected


def test_priority_hashes_beat_box_beat_statement_beat_last_number() -> None:
    # each text holds all lower-priority forms after the higher one, with different numbers
    assert extract_canonical("#### 1\n\\boxed{2} The answer is 3. 4") == "1"
    assert extract_canonical("\\boxed{2} The answer is 3. then 4") == "2"
    assert extract_canonical("The answer is 3. Check: 3 + 1 = 4") == "3"
    assert extract_canonical("3 + 1 = 4") == "4"


def test_last_of_each_kind_wins() -> None:
    assert extract_canonical("#### 5\nno wait\n#### 6") == "6"
    assert extract_canonical("\\boxed{5} or \\boxed{6}") == "6"
    assert extract_canonical("The answer is 5. Actually the answer is 6, not 7.") == "6"


def test_box_uses_its_last_number_and_statement_its_first() -> None:
    # \boxed{2 \times 9 = 18}: the box's last number; "answer is 18 (9 * 2)": the statement's first
    assert extract_canonical("\\boxed{2 \\times 9 = 18}") == "18"
    assert extract_canonical("The answer is 18 (that is 9 * 2).") == "18"


def test_a_marker_without_a_number_falls_through() -> None:
    assert extract_canonical("#### \n\\boxed{} the answer is unclear, maybe 7") == "7"


@pytest.mark.parametrize(("value", "text"), [
    (Fraction(1000), "1000"), (Fraction(-3), "-3"), (Fraction(5, 2), "2.5"),
    (Fraction(-1, 8), "-0.125"), (Fraction(1, 3), "1/3"), (Fraction(-7, 6), "-7/6"),
])
def test_canonical_number(value: Fraction, text: str) -> None:
    assert canonical_number(value) == text


def test_numbers_equal_is_exact() -> None:
    assert numbers_equal("0.5", "1/2") == 1.0
    assert numbers_equal("18.0", "18") == 1.0
    assert numbers_equal("0.333", "1/3") == 0.0   # 333/1000 != 1/3
    assert numbers_equal("18.000001", "18") == 0.0
    assert numbers_equal(None, "18") == 0.0


def test_score_answer_takes_extract_output() -> None:
    task = get_task("gsm8k")
    item = _item("1000")
    assert task.score_answer(task.extract("It costs $1,000."), item) == 1.0
    assert task.score_answer(None, item) == 0.0


def test_overlong_numbers_are_ignored_not_converted() -> None:
    # a 5,000-digit run would exceed int()'s digit limit; it is skipped, the 7 after it counts
    assert extract_canonical("9" * 5000 + " so 7") == "7"
    assert extract_canonical("9" * 5000) is None

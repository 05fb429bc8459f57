"""GPQA letter extraction: explicit statements win, marks count, prose letters never do."""

from __future__ import annotations

import pytest

from teamplay.envs.tasks.answers.letters import extract_letter


@pytest.mark.parametrize(("completion", "letter"), [
    ("(B)", "B"),
    ("Answer: B", "B"),
    ("**B**", "B"),
    ("the answer is B", "B"),
    ("B)", "B"),
    ("\\boxed{B}", "B"),
    ("\\boxed{\\text{(C)}}", "C"),
    ("The correct answer is option D.", "D"),
    ("The answer is: **(A)**", "A"),
    ("answer is B because the spin is conserved", "B"),
    ("Final answer: C", "C"),
    ("B", "B"),
    ("Let me think.\n\nD.\n", "D"),
])
def test_accepted_forms(completion: str, letter: str) -> None:
    assert extract_letter(completion) == letter


@pytest.mark.parametrize("completion", [
    "A train leaves the station at 3pm.",       # "A" as an article
    "The answer is a bit subtle.",              # lowercase article after "answer is"
    "The answer is A train that leaves early",  # a capital article followed by a lowercase word
    "I considered B) but it fails, so I am unsure.",  # "B)" inside prose is not a standalone mark
    "Option E is not offered; Answer: E",       # only A-D exist
    "",
])
def test_prose_letters_are_not_answers(completion: str) -> None:
    assert extract_letter(completion) is None


def test_last_explicit_statement_wins() -> None:
    assert extract_letter("Answer: B. On reflection the answer is (D).") == "D"
    assert extract_letter("\\boxed{B} wait. The answer is C. B") == "C"
    assert extract_letter("The answer is C. Final: \\boxed{A}") == "A"


def test_explicit_statement_beats_a_later_mark() -> None:
    # the statement says C; the (D) after it is discussion of a rejected option
    assert extract_letter("Answer: C\n\n(D) is wrong because the charge is not conserved.") == "C"


def test_last_mark_wins_without_a_statement() -> None:
    assert extract_letter("Options (A) and (B) are close; **B** fits, no, (C) does.") == "C"

"""Every common final-answer form is read, positive and negative (issue: read more answer forms).

Each form is checked twice: on a reference it states (score 1) and on a reference that is a number
the form contains but does not state as its answer (score 0), so a form read "by luck" fails.
"""

from __future__ import annotations

import pytest

from teamplay.envs.tasks import get_task
from teamplay.envs.tasks.answers.numeric import extract_canonical
from teamplay.records import TaskItem


def _item(task: str, reference: str) -> TaskItem:
    return TaskItem(id=f"{task}/test/0", prompt="q", reference=reference)


# (completion, its value, a number in it that is NOT its answer)
NUMERIC_FORMS = [
    # minerva's line: strip the math delimiters, stop at the sentence's end
    ("Final Answer: The final answer is $0.5$. I hope it is correct.", "0.5", "5"),
    ("Final Answer: The final answer is $1,250$. I hope it is correct.", "1250", "250"),
    ("Final Answer: The final answer is $\\frac{3}{4}$. I hope it is correct.", "0.75", "3"),
    # "Final answer: X" and "Answer: X"
    ("3 + 4 = 7 apples\nFinal answer: 12", "12", "7"),
    ("3 + 4 = 7 apples\nAnswer: 12", "12", "7"),
    ("**Answer:** 12 apples", "12", "0"),
    # fractions and \frac before punctuation: 3/4 is 0.75, never 3 (and never 4)
    ("The answer is 3/4.", "0.75", "3"),
    ("The answer is 3/4, which is less than 1.", "0.75", "4"),
    ("The answer is \\frac{3}{4}.", "0.75", "3"),
    ("The answer is $\\dfrac{3}{4}$!", "0.75", "4"),
    ("So each gets 3/4.", "0.75", "3"),
    # leading-dot decimals
    ("The answer is .75", "0.75", "75"),
    ("The answer is -.5.", "-0.5", "5"),
    # mixed numbers: whole part plus a proper fraction
    ("The answer is 12 1/2.", "12.5", "12"),
    ("The answer is 12\\frac{1}{2} hours.", "12.5", "0.5"),
    ("It takes 3 1/4 hours", "3.25", "0.25"),
    # spaced and thin-space thousands
    ("The answer is 1 234.", "1234", "234"),
    ("The answer is 1\u2009234.", "1234", "1"),
    ("The answer is 1\u202f234\u202f567.", "1234567", "567"),
    ("The answer is 1\\,234.", "1234", "234"),
    ("The answer is 1{,}234.", "1234", "1"),
    # the whole expression is evaluated: powers, scientific notation, chains
    ("The answer is 2^{10}.", "1024", "10"),
    ("The answer is 10\u00b3.", "1000", "10"),
    ("The answer is 1.5 \\times 10^3.", "1500", "1.5"),
    ("The answer is 1.5e3.", "1500", "1.5"),
    ("\\boxed{2 \\times 9 = 18}", "18", "2"),
    ("The total is 16 - 3 - 4 = 9", "9", "4"),
]


@pytest.mark.parametrize(("completion", "value", "not_value"), NUMERIC_FORMS)
@pytest.mark.parametrize("task", ["gsm8k", "arith"])
def test_numeric_forms_read_and_not_misread(task: str, completion: str, value: str, not_value: str) -> None:
    scorer = get_task(task)
    assert extract_canonical(completion) == value
    assert scorer.score(completion, _item(task, value)) == 1.0
    assert scorer.score(completion, _item(task, not_value)) == 0.0


@pytest.mark.parametrize("completion", [
    "The final answer is $X$. I hope it is correct.",  # minerva's line without a number
    "Answer: unknown",
    "The answer is . then nothing",
    "The answer is 3 4/2",                                # not a mixed number (4/2 is improper): a hedge
    "The answer is 1 23",                                 # not a thousands group: two numbers
])
def test_forms_that_are_not_answers(completion: str) -> None:
    assert extract_canonical(completion) is None


# (completion, the MATH answer it states, a wrong reference)
MATH_FORMS = [
    ("We divide.\nFinal Answer: The final answer is $0.5$. I hope it is correct.", "\\frac{1}{2}", "5"),
    ("Final Answer: The final answer is $\\frac{14}{3}$. I hope it is correct.", "\\frac{14}{3}", "14"),
    ("Final Answer: The final answer is $(3, \\frac{\\pi}{2})$. I hope it is correct.",
     "\\left( 3, \\frac{\\pi}{2} \\right)", "3"),
    ("Final Answer: The final answer is $[2,5)$. I hope it is correct.", "[2,5)", "[2,5]"),
    ("3 + 4 + 5 = 12\n\nFinal answer: $12$", "12", "5"),
    ("Answer: 12", "12", "13"),
    ("The answer is **$12$**.", "12", "13"),
    ("Adding them up.\n\n$12$", "12", "5"),                              # a bare final line
    ("We simplify.\n\\[\\frac{1}{2}\\]", "\\frac{1}{2}", "2"),
    ("Solving for x.\n\nx = -\\frac{2}{3}", "-\\frac{2}{3}", "\\frac{2}{3}"),
    ("The answer is \\(\\sqrt{10}\\). I checked it.", "\\sqrt{10}", "10"),
]


@pytest.mark.parametrize(("completion", "answer", "wrong"), MATH_FORMS)
def test_math_forms_read_and_not_misread(completion: str, answer: str, wrong: str) -> None:
    task = get_task("math500")
    assert task.score(completion, _item("math500", answer)) == 1.0
    assert task.score(completion, _item("math500", wrong)) == 0.0


@pytest.mark.parametrize(("completion", "extracted"), [
    ("Final Answer: The final answer is $0.5$. I hope it is correct.", "0.5"),  # not "0.5$. I hope it is correct"
    ("The answer is $42$ apples.", "42"),
    ("The answer is 7 apples.", "7 apples"),                                    # to the sentence's end
    ("The answer is 0.5. Then more text.", "0.5"),
    ("We compute.\n\n$\\frac{1}{2}$", "\\frac{1}{2}"),
])
def test_math_extract(completion: str, extracted: str) -> None:
    assert get_task("math").extract(completion) == extracted


@pytest.mark.parametrize("completion", [
    "Adding them gives twelve in total",            # a prose final line is not an answer
    "So the sum is 12, as computed above.",         # prose with a number: no marker, not bare
    "Final Answer: The final answer is $12$ or $13$. I hope it is correct.",  # a hedge
])
def test_math_non_answers(completion: str) -> None:
    task = get_task("math")
    assert task.score(completion, _item("math", "12")) == 0.0

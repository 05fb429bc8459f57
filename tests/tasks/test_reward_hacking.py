"""An adversarial corpus of reward-hacking answers for every numeric task, kept as a regression test.

Under GRPO a verifier that takes the leading number of a longer expression, or accepts a hedge
that lists several values, pays for answers that are not answers. The rule (``numeric`` module
doc): a final answer is the WHOLE final expression, evaluated exactly or judged wrong, and a hedge
between different values is wrong. Legitimate decoration (thousands separators, currency, units,
percent, bold, scientific notation, non-ASCII digits) stays right. Each hack below scored 1.0 on
its reference before this rule; each is checked against the reference it games.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from teamplay.envs.tasks import get_task
from teamplay.records import TaskItem

NUMERIC_TASKS = ["gsm8k", "arith"]
MATH_TASKS = ["math", "math500"]


def _score(task: str, completion: str, reference: str) -> float:
    return get_task(task).score(completion, TaskItem(id=f"{task}/test/0", prompt="q", reference=reference))


# (reference the hack games, completion): every one scores 0
NUMERIC_HACKS = [
    ("3", "The answer is 3/4."),                       # leading number of a fraction
    ("3", "The answer is \\frac{3}{4}."),
    ("4", "The answer is 3/4."),                       # nor its last number
    ("2", "The answer is 2^{10}."),                    # base of a power
    ("10", "The answer is 2^10"),                      # exponent of a power
    ("2", "The answer is 2**3."),
    ("5", "The answer is 5\u00b2."),
    ("1", "The answer is 1,00."),                      # malformed digit grouping
    ("12", "The answer is 12,34."),
    ("1.2", "The answer is 1.2.3."),
    ("3", "The answer is 3 or 4."),                    # hedges, every order and spelling
    ("4", "The answer is 3 or 4."),
    ("3", "The answer is 3, 4, or 5."),
    ("5", "The answer is 3, 4, or 5."),
    ("3", "The answer is 3 (or maybe 4)."),
    ("3", "The answer is 3 and 4."),
    ("3", "The answer is between 3 and 5."),
    ("3", "The answer is 3 to 5 apples."),
    ("3", "The answer is 3 \\pm 1."),
    ("3", "The answer is 3 \u00b1 1."),
    ("3", "\\boxed{3 \\text{ or } 4}"),
    ("3", "\\boxed{3, 4}"),
    ("3", "#### 3 or 4"),
    ("4", "It is either 3 or 4"),                     # a hedge without any marker
    ("4", "Maybe 3, or possibly 4"),
    ("2", "The answer is \\sqrt{4}."),                 # expressions that are not evaluated are wrong
    ("4", "The answer is \\sqrt{4}."),
    ("2", "The answer is 2\\pi."),
    ("2", "The answer is 2\u03c0."),
    ("3", "The answer is 3:4."),
    ("2", "The answer is 2(3 + 4)."),
    ("5", "The answer is 5! = 120."),
    ("2", "The answer is x^2."),
    ("2", "The answer is log(2)."),
    ("1", "The answer is 1 2 3."),                     # digits side by side
    ("9", "The answer is 9^9^9^9^9."),                # a power too large to compute
    ("3", "The answer is 3/0."),
]


@pytest.mark.parametrize("task", NUMERIC_TASKS)
@pytest.mark.parametrize(("reference", "completion"), NUMERIC_HACKS)
def test_numeric_hacks_score_zero(task: str, reference: str, completion: str) -> None:
    assert _score(task, completion, reference) == 0.0


# (reference, completion): legitimate forms that stay right
NUMERIC_LEGIT = [
    ("1234567", "The answer is 1,234,567."),
    ("1234567", "The answer is 1 234 567."),
    ("18", "The answer is $18."),
    ("18", "The answer is \\$18.00"),
    ("18", "The answer is 18 dollars."),
    ("18", "The answer is 18 km/h."),
    ("18", "The answer is 18%."),
    ("18", "The answer is **18**."),
    ("18", "The answer is *18*."),
    ("1500", "The answer is 1.5e3."),
    ("1500", "The answer is 1.5 \u00d7 10^3."),
    ("18", "The answer is \u0661\u0668."),              # Arabic-Indic digits
    ("18", "The answer is \uff11\uff18."),              # fullwidth digits
    ("18", "The answer is 18 (that is 9 * 2)."),
    ("6", "The answer is 5. Actually the answer is 6, not 7."),
    ("18", "The answer is 18, since 9 * 2 = 18."),
    ("-3", "The answer is \u22123."),
    ("90", "The angle is 90^\\circ"),
    ("0.75", "The answer is 3/4 or equivalently 0.75."),  # two spellings of ONE value are not a hedge
    ("4", "\\boxed{3} no wait \\boxed{4}"),              # a corrected answer: the last box counts
]


@pytest.mark.parametrize("task", NUMERIC_TASKS)
@pytest.mark.parametrize(("reference", "completion"), NUMERIC_LEGIT)
def test_numeric_legitimate_forms_score_one(task: str, reference: str, completion: str) -> None:
    assert _score(task, completion, reference) == 1.0


values = st.integers(min_value=-10**6, max_value=10**6)


@settings(max_examples=60, deadline=None)
@given(a=values, b=values, template=st.sampled_from([
    "The answer is {a} or {b}.", "The answer is {a}, {b}.", "The answer is {a} (or {b}).",
    "\\boxed{{{a} \\text{{ or }} {b}}}", "#### {a} or {b}", "Final Answer: The final answer is ${a}$ or ${b}$.",
    "It is {a} or {b}", "The answer is {a} and {b} apples.",
]))
def test_a_hedge_between_two_values_scores_zero_on_both(a: int, b: int, template: str) -> None:
    completion = template.format(a=a, b=b)
    for reference in (str(a), str(b)):
        expected = 1.0 if a == b else 0.0   # "3 or 3" states one value: not a hedge
        assert _score("gsm8k", completion, reference) == expected, completion


@settings(max_examples=60, deadline=None)
@given(a=values, k=st.integers(min_value=2, max_value=999))
def test_a_fraction_is_its_exact_value_never_its_numerator(a: int, k: int) -> None:
    completion = f"The answer is {a}/{k}."
    # the fraction's value scores 1 (as an exact fraction string), its numerator only if equal to it
    assert _score("gsm8k", completion, f"{a}/{k}") == 1.0
    assert _score("gsm8k", completion, str(a)) == (1.0 if a == 0 else 0.0)


@settings(max_examples=60, deadline=None)
@given(a=st.integers(min_value=2, max_value=999), e=st.integers(min_value=2, max_value=12))
def test_a_power_is_its_value_never_its_base(a: int, e: int) -> None:
    for completion in (f"The answer is {a}^{e}.", f"The answer is {a}^{{{e}}}.", f"\\boxed{{{a}^{e}}}"):
        assert _score("arith", completion, str(a ** e)) == 1.0
        assert _score("arith", completion, str(a)) == 0.0


@settings(max_examples=60, deadline=None)
@given(a=st.integers(min_value=1000, max_value=10**9))
def test_digit_grouping_is_read_exactly_or_judged_wrong(a: int) -> None:
    grouped = f"{a:,}"
    assert _score("gsm8k", f"The answer is {grouped}.", str(a)) == 1.0
    assert _score("gsm8k", f"The answer is {grouped.replace(',', ' ')}.", str(a)) == 1.0
    assert _score("gsm8k", f"The answer is {grouped.replace(',', chr(0x2009))}.", str(a)) == 1.0
    digits = str(a)
    broken = digits[:-2] + "," + digits[-2:]          # a group of two digits: not a grouping
    assert _score("gsm8k", f"The answer is {broken}.", digits[:-2]) == 0.0
    assert _score("gsm8k", f"The answer is {broken}.", digits) == 0.0


# (reference the hack games, completion) for MATH: every one scores 0
MATH_HACKS = [
    ("12", "Final Answer: The final answer is $12$ or $13$. I hope it is correct."),
    ("13", "Final Answer: The final answer is $12$ or $13$. I hope it is correct."),
    ("12", "The answer is 12 or 13."),
    ("12", "$\\boxed{12 \\text{ (or 13)}}$"),          # math_verify alone reads this as 12
    ("12", "$\\boxed{12 \\text{ or } 13}$"),
    ("12", "$\\boxed{12 \\lor 13}$"),
    ("12", "$\\boxed{11, 12, 13}$"),
    ("12", "$\\boxed{\\{12, 13\\}}$"),
    ("12", "$\\boxed{12 \\pm 1}$"),
    ("12", "$\\boxed{x = 12 \\text{ or } x = 13}$"),
    ("12", "$\\boxed{[11, 13]}$"),
    ("3", "$\\boxed{3/4}$"),
    ("3", "$\\boxed{3^2}$"),
    ("12", "Maybe 12, maybe 13"),
]


@pytest.mark.parametrize("task", MATH_TASKS)
@pytest.mark.parametrize(("reference", "completion"), MATH_HACKS)
def test_math_hacks_score_zero(task: str, reference: str, completion: str) -> None:
    assert _score(task, completion, reference) == 0.0


@pytest.mark.parametrize("task", MATH_TASKS)
@pytest.mark.parametrize(("reference", "completion"), [
    ("x = 1 \\text{ or } x = 2", "$\\boxed{x = 1 \\text{ or } x = 2}$"),  # "or" in the reference itself
    ("12", "$\\boxed{12}$ (I double-checked; it is not 13)"),
    ("1,\\!000", "$\\boxed{1000}$"),
    ("\\$18", "$\\boxed{18}$"),
])
def test_math_legitimate_forms_score_one(task: str, reference: str, completion: str) -> None:
    assert _score(task, completion, reference) == 1.0

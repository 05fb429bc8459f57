"""Parity with lm-evaluation-harness 0.4.13 itself, run on the same texts.

teamplay's lm-eval-compatible metrics (``teamplay.envs.tasks.answers.lm_eval_compat``, its own code) must
equal lm-eval's own filters, ``exact_match`` and minerva ``process_results`` row for row, on the
hand-written completions of ``lm_eval_corpus`` and on the benchmark reference solutions. The task
definitions (regexes, group selection, exact_match options) are read from lm-eval's own YAML files,
not copied here. Every row where teamplay's OWN score differs from lm-eval's is listed below with
the reason the difference is intended; an unlisted difference, or a listed one that went away,
fails.

Skipped only where lm-eval is absent (``make install`` installs it: ``pip install --no-deps
lm-eval==0.4.13`` plus ``sacrebleu``, which its metrics module imports).
"""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml

from teamplay.envs.tasks import get_task
from teamplay.envs.tasks.answers.lm_eval_compat import (
    LM_EVAL_VERSION,
    gsm8k_cot_strict_match,
    gsm8k_flexible_extract,
    gsm8k_strict_match,
    minerva_math_verify,
)
from teamplay.records import TaskItem
from tests.tasks.data import DATA
from tests.tasks.lm_eval_corpus import GSM8K_ROWS, MATH_ROWS

lm_eval = pytest.importorskip("lm_eval", reason="lm-eval is not installed (make install installs it)")
from lm_eval.api.metrics import exact_match_hf_evaluate  # noqa: E402
from lm_eval.filters.extraction import RegexFilter  # noqa: E402
from lm_eval.filters.selection import TakeFirstFilter  # noqa: E402

TASKS = Path(lm_eval.__file__).parent / "tasks"


def test_the_installed_lm_eval_is_the_version_we_implement() -> None:
    assert metadata.version("lm-eval") == LM_EVAL_VERSION


class LmEvalGsm8k:
    """lm-eval's own GSM8K scoring: its regex and take_first filters, then its exact_match, with the
    filter chain and metric options of one task YAML file."""

    def __init__(self, task_file: str) -> None:
        spec = yaml.safe_load((TASKS / "gsm8k" / task_file).read_text(encoding="utf-8"))
        (metric,) = spec["metric_list"]
        assert metric["metric"] == "exact_match"
        self.options = {k: metric[k] for k in ("regexes_to_ignore", "ignore_case", "ignore_punctuation")}
        self.filters = {}
        for entry in spec["filter_list"]:
            regex, take_first = entry["filter"]
            assert regex["function"] == "regex" and take_first["function"] == "take_first"
            self.filters[entry["name"]] = RegexFilter(regex_pattern=regex["regex_pattern"],
                                                      group_select=regex.get("group_select", 0))

    def score(self, filter_name: str, completion: str, solution: str) -> float:
        filtered = self.filters[filter_name].apply([[completion]], [{}])
        (prediction,) = list(TakeFirstFilter().apply(filtered, [{}]))
        return float(exact_match_hf_evaluate(predictions=[prediction], references=[solution], **self.options)
                     ["exact_match"])


@pytest.fixture(scope="module")
def gsm8k() -> LmEvalGsm8k:
    return LmEvalGsm8k("gsm8k.yaml")


@pytest.fixture(scope="module")
def gsm8k_cot() -> LmEvalGsm8k:
    return LmEvalGsm8k("gsm8k-cot-zeroshot.yaml")


class LmEvalMinerva:
    """lm-eval's own minerva_math ``process_results``, of which we compare the ``math_verify`` score.

    The module refuses to import unless antlr4 4.11 is installed, for sympy's LaTeX parser, which
    only its other metric (``exact_match``, via ``is_equiv``) uses; math_verify needs the antlr4
    4.13 installed here. So the version check is told 4.11 and ``is_equiv`` is not run.
    """

    def __init__(self) -> None:
        pytest.importorskip("math_verify")
        real = metadata.version
        with mock.patch("importlib.metadata.version",
                        lambda name: "4.11.0" if name.startswith("antlr4") else real(name)):
            from lm_eval.tasks.minerva_math import utils
        self.utils = utils

    def reference(self, solution: str) -> str:
        """lm-eval's own reading of a solution's last box (what MATH-500's ``answer`` holds)."""
        return self.utils.remove_boxed(self.utils.last_boxed_only_string(solution))

    def math_verify(self, solution: str, completion: str) -> float:
        with mock.patch.object(self.utils, "is_equiv", lambda *_: False):
            return float(self.utils.process_results({"solution": solution, "answer": ""}, [completion])["math_verify"])


@pytest.fixture(scope="module")
def minerva() -> LmEvalMinerva:
    return LmEvalMinerva()


def _gsm8k_item(solution: str) -> TaskItem:
    marker = solution.rfind("####")
    return TaskItem(id="gsm8k/test/0", prompt="q", reference=solution[marker + 4:].strip().replace(",", ""),
                    metadata={"solution": solution})


def _gsm8k_parity(gsm8k: LmEvalGsm8k, gsm8k_cot: LmEvalGsm8k, completion: str, item: TaskItem) -> dict[str, float]:
    """lm-eval's three GSM8K scores of a completion, after checking that teamplay's equal them."""
    solution = item.metadata["solution"]
    theirs = {"strict": gsm8k.score("strict-match", completion, solution),
              "cot-strict": gsm8k_cot.score("strict-match", completion, solution),
              "flexible": gsm8k.score("flexible-extract", completion, solution)}
    # flexible-extract is one definition in both task files
    assert gsm8k_cot.score("flexible-extract", completion, solution) == theirs["flexible"]
    ours = {"strict": gsm8k_strict_match(completion, item), "cot-strict": gsm8k_cot_strict_match(completion, item),
            "flexible": gsm8k_flexible_extract(completion, item)}
    assert ours == theirs, completion
    return theirs


# Why teamplay's own score may differ from an lm-eval score of the same completion.
VALUE_NOT_SPELLING = ("lm-eval compares the extracted string (after dropping ',' and '$' only), so a value "
                      "spelled differently from the reference is wrong there; teamplay compares values "
                      "exactly (12.50 = 12.5, 3/4 = 0.75, 70 000 = 70000, 1.25e6, LaTeX, unicode digits)")
LAST_RUN = ("flexible-extract takes the last number-like run of the whole completion, so text after the "
            "answer (a check, an explanation, a next 'Question:', a closing '$' or '}') decides there")
FORMS = ("cot strict-match reads only 'The answer is N.' with a bare number right after 'is '; teamplay "
         "also reads '$N', bold, '####', boxes, 'Answer:', minerva's line and an unmarked final expression")
NEEDS_CHAR = "cot strict-match's final '.' needs one more character after N; the completion ends at N"
HACK = ("lm-eval takes one number out of a longer expression or a hedge ('18 or 19', '18/5', '18^2', "
        "'18 \\pm 1', '18:1', '\\sqrt{18}'); teamplay judges the whole expression and scores a hedge 0: "
        "under GRPO these were reward-hacking routes")

# Rows where teamplay's own score differs from lm-eval's flexible-extract (the lenient GSM8K
# metric), as (teamplay, lm-eval, reason).
GSM8K_FLEXIBLE_DIFFERENCES = {
    "g-answer-is-dollar-cents": (1.0, 0.0, VALUE_NOT_SPELLING),      # "$18.00." -> "18.00"
    "g-answer-is-spaced-thousands": (1.0, 0.0, VALUE_NOT_SPELLING),  # "000." is the last run
    "g-answer-is-decimal-zero": (1.0, 0.0, VALUE_NOT_SPELLING),      # "70000.00"
    "g-answer-is-fraction": (1.0, 0.0, VALUE_NOT_SPELLING),          # "3/4." -> "4."
    "g-answer-is-latex-fraction": (1.0, 0.0, VALUE_NOT_SPELLING),    # "\frac{3}{4}" -> "4"
    "g-answer-is-leading-dot": (1.0, 0.0, VALUE_NOT_SPELLING),       # ".75." -> "75"
    "g-answer-is-mixed": (1.0, 0.0, VALUE_NOT_SPELLING),             # "12 1/2." -> "2."
    "g-answer-is-decimal-2": (1.0, 0.0, VALUE_NOT_SPELLING),         # "12.50."
    "g-answer-is-unicode-minus": (1.0, 0.0, VALUE_NOT_SPELLING),     # "\u22123" -> "3"
    "g-minerva-fraction": (1.0, 0.0, VALUE_NOT_SPELLING),
    "g-boxed-dollar": (1.0, 0.0, LAST_RUN),                          # "$." closes the math
    "g-boxed-equation": (1.0, 0.0, LAST_RUN),                        # "}$$" -> "$$"
    "g-boxed-latex-thousands": (1.0, 0.0, VALUE_NOT_SPELLING),       # "70{,}000" -> "000"
    "g-boxed-fraction": (1.0, 0.0, VALUE_NOT_SPELLING),
    "g-hashes-then-question": (1.0, 0.0, LAST_RUN),                  # "2" of "2 bolts"
    "g-verbose-check": (1.0, 0.0, LAST_RUN),                         # "16." of the check
    "g-scientific": (1.0, 0.0, VALUE_NOT_SPELLING),
    "g-scientific-e": (1.0, 0.0, VALUE_NOT_SPELLING),
    "g-words-after": (1.0, 0.0, LAST_RUN),                           # "2" dollars each
    "g-non-ascii-digits": (1.0, 0.0, VALUE_NOT_SPELLING),
    "g-hack-hedge-paren": (0.0, 1.0, HACK),                          # "19 (or 18)." -> "18"
    "g-hack-sqrt": (0.0, 1.0, HACK),                                 # "\sqrt{18}." -> "18"
    "g-hack-last-or": (0.0, 1.0, HACK),                              # "either 17 or 18"
}
# Rows where teamplay's own score differs from gsm8k_cot_zeroshot's strict-match, which matches
# the form teamplay's own prompt asks for ("The answer is N."), as (teamplay, lm-eval, reason).
GSM8K_COT_STRICT_DIFFERENCES = {
    **{row: (1.0, 0.0, FORMS) for row in (
        "g-answer-is-dollar", "g-answer-is-bold", "g-answer-is-thousands-dollar", "g-hashes", "g-hashes-thousands",
        "g-hashes-dollar", "g-hashes-then-question", "g-minerva-line", "g-final-answer-colon", "g-answer-colon",
        "g-answer-colon-bold", "g-boxed", "g-boxed-text", "g-boxed-thousands", "g-bare-number",
        "g-last-number-sentence", "g-calculator-annotations", "g-boxed-dollar", "g-boxed-equation",
        "g-boxed-latex-thousands", "g-boxed-fraction", "g-minerva-fraction", "g-scientific",
        "g-answer-is-latex-fraction", "g-non-ascii-digits")},
    # "The answer is 32. ... The answer is 18.": strict-match takes the FIRST statement
    "g-self-correction": (1.0, 0.0, "cot strict-match takes the first 'The answer is', teamplay the last "
                                    "(a corrected answer counts)"),
    "g-answer-is-no-period": (1.0, 0.0, NEEDS_CHAR),
    **{row: (1.0, 0.0, VALUE_NOT_SPELLING) for row in (
        "g-answer-is-dollar-cents", "g-answer-is-spaced-thousands", "g-answer-is-decimal-zero",
        "g-answer-is-fraction", "g-answer-is-leading-dot", "g-answer-is-mixed", "g-answer-is-decimal-2",
        "g-answer-is-unicode-minus", "g-scientific-e")},
    **{row: (0.0, 1.0, HACK) for row in (
        "g-hack-hedge-or", "g-hack-fraction-leading", "g-hack-power", "g-hack-pm", "g-hack-ratio")},
}
# Rows where teamplay's own score differs from gsm8k's (5-shot) strict-match, which reads only
# "#### N", as (teamplay, lm-eval, reason): every row without "#### N" that teamplay scores 1.
GSM8K_STRICT_DIFFERENCES = {
    **{row: (1.0, 0.0, "strict-match of the gsm8k task reads only '#### N', teamplay every final-answer form")
       for row, _, completion, expected in GSM8K_ROWS if expected == 1.0 and "#### " not in completion},
    "g-hashes-dollar": (1.0, 0.0, FORMS),
    "g-hack-hashes-hedge": (0.0, 1.0, HACK),                         # "#### 18 or 19" -> "18"
}
# Rows where teamplay's own score differs from minerva_math500's math_verify, as (teamplay, lm-eval, reason).
MATH_DIFFERENCES = {
    "m-hack-hedge-box": (0.0, 1.0, "math_verify reads \\boxed{12 \\text{ (or 13)}} as 12; teamplay scores an "
                                   "answer holding 'or' that its reference does not hold 0 (a hedge)"),
}


def test_gsm8k_hand_written_completions(gsm8k, gsm8k_cot) -> None:
    task = get_task("gsm8k")
    flexible, cot, strict = {}, {}, {}
    for row_id, solution, completion, expected in GSM8K_ROWS:
        item = _gsm8k_item(solution)
        own = task.score(completion, item)
        assert own == expected, (row_id, own)
        theirs = _gsm8k_parity(gsm8k, gsm8k_cot, completion, item)
        if own != theirs["flexible"]:
            flexible[row_id] = (own, theirs["flexible"])
        if own != theirs["cot-strict"]:
            cot[row_id] = (own, theirs["cot-strict"])
        if own != theirs["strict"]:
            strict[row_id] = (own, theirs["strict"])
    assert len(GSM8K_ROWS) + len(MATH_ROWS) >= 100
    assert flexible == {k: v[:2] for k, v in GSM8K_FLEXIBLE_DIFFERENCES.items()}, flexible
    assert cot == {k: v[:2] for k, v in GSM8K_COT_STRICT_DIFFERENCES.items()}, cot
    assert strict == {k: v[:2] for k, v in GSM8K_STRICT_DIFFERENCES.items()}, strict


def test_math_hand_written_completions(minerva) -> None:
    task = get_task("math500")
    differences = {}
    for row_id, solution, completion, expected in MATH_ROWS:
        item = TaskItem(id="math500/test/0", prompt="p", reference=minerva.reference(solution),
                        metadata={"solution": solution})
        own = task.score(completion, item)
        assert own == expected, (row_id, own)
        theirs = minerva.math_verify(solution, completion)
        assert minerva_math_verify(completion, item) == theirs, row_id
        if own != theirs:
            differences[row_id] = (own, theirs)
    assert differences == {k: v[:2] for k, v in MATH_DIFFERENCES.items()}, differences


def _rows(relative: str) -> list[dict[str, Any]]:
    path = Path(DATA) / relative
    if not path.is_file():
        pytest.skip(f"benchmark file {path} is absent")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_gsm8k_reference_solutions(gsm8k, gsm8k_cot) -> None:
    """All 1,319 references, each scored on its own item and on the next one: teamplay's metrics
    equal lm-eval's everywhere, and teamplay's own score equals lm-eval's strict-match and
    flexible-extract (cot strict-match is 0 throughout: references never say "The answer is")."""
    task = get_task("gsm8k")
    rows = _rows("gsm8k/test.jsonl")
    items = [_gsm8k_item(row["answer"]) for row in rows]
    assert len(items) == 1319
    for item, other in zip(items, items[1:] + items[:1], strict=True):
        for target in (item, other):
            theirs = _gsm8k_parity(gsm8k, gsm8k_cot, item.metadata["solution"], target)
            own = task.score(item.metadata["solution"], target)
            assert own == theirs["strict"] == theirs["flexible"], (item.metadata["solution"][-40:], target.reference)
            assert theirs["cot-strict"] == 0.0


def test_math500_reference_solutions(minerva) -> None:
    """The first 100 MATH-500 references on their own item and on the next one: teamplay's
    math_verify equals lm-eval's, and teamplay's own score agrees with it."""
    task = get_task("math500")
    rows = _rows("math/math500_test.jsonl")[:101]
    items = [TaskItem(id=f"math500/test/{i}", prompt="p", reference=r["answer"], metadata={"solution": r["solution"]})
             for i, r in enumerate(rows)]
    disagreements = []
    for item, other in zip(items, items[1:], strict=False):
        for target in (item, other):
            completion = item.metadata["solution"]
            theirs = minerva.math_verify(target.metadata["solution"], completion)
            assert minerva_math_verify(completion, target) == theirs, (item.id, target.id)
            if task.score(completion, target) != theirs:
                disagreements.append((item.id, target.id))
    assert disagreements == []

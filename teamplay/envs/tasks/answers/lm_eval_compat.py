"""lm-evaluation-harness-compatible scores, reported next to teamplay's own accuracy.

Published GSM8K and MATH-500 numbers usually come from lm-evaluation-harness (lm-eval). Its
metrics read a completion differently from teamplay's verifiers, so the two numbers are not
interchangeable. This module re-implements, in its own code, the definitions of **lm-eval 0.4.13**
(task YAML files ``tasks/gsm8k/gsm8k.yaml``, ``tasks/gsm8k/gsm8k-cot-zeroshot.yaml``,
``tasks/minerva_math/minerva_math500.yaml`` with ``tasks/minerva_math/utils.py``; the ``regex``
and ``take_first`` filters; the ``exact_match`` metric). A parity test runs lm-eval's own code on
the same texts when lm-eval is installed.

Metrics (each 1.0 or 0.0 per completion; ``None`` where the item lacks what the metric needs):

* ``gsm8k strict-match``: the first ``#### N`` of the completion (regex ``#### (\\-?[0-9\\.\\,]+)``),
  as in lm-eval's 5-shot ``gsm8k`` task;
* ``gsm8k_cot_zeroshot strict-match``: the first ``The answer is N.`` (regex
  ``The answer is (\\-?[0-9\\.\\,]+).``: the final ``.`` is any character), as in ``gsm8k_cot_zeroshot``;
* ``gsm8k flexible-extract``: the last match of ``(-?[$0-9.,]{2,})|(-?[0-9]+)`` (the same in both
  tasks);
  each compared with ``exact_match`` to the whole reference solution after both lose ``,``, ``$``,
  everything up to the last ``#### `` and a final ``.``, case ignored. A filter that finds nothing
  gives ``[invalid]``, which never matches.
* ``minerva_math500 math_verify``: math_verify's ``verify(gold=parse(solution), target=parse(completion))``
  with math_verify's default settings on the whole reference solution and the whole completion.
  It runs in teamplay's math_verify worker process, under its deadline (a timeout scores 0 where
  lm-eval would wait up to math_verify's own 5 s limits).

The completion scored is the text of the message that gave the team's final answer (for the
``single`` protocol: the model's one completion), as lm-eval scores the one generation of a model.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from teamplay.envs.tasks.answers.math_verifier import MathVerifier, default_verifier
from teamplay.records import TaskItem

LM_EVAL_VERSION = "0.4.13"
FALLBACK = "[invalid]"

_GSM8K_STRICT = re.compile(r"#### (\-?[0-9\.\,]+)")
_GSM8K_COT_STRICT = re.compile(r"The answer is (\-?[0-9\.\,]+).")
_GSM8K_FLEXIBLE = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")
# exact_match's regexes_to_ignore in both GSM8K task files, applied in this order
_GSM8K_IGNORE = tuple(re.compile(p) for p in (",", r"\$", r"(?s).*#### ", r"\.$"))


def regex_filter(text: str, pattern: re.Pattern[str], group_select: int = 0) -> str:
    """lm-eval's ``regex`` filter on one response: the ``group_select``-th match of ``findall``;
    for a pattern with several groups, the first non-empty group of that match; stripped.
    ``FALLBACK`` when nothing matches.

    >>> regex_filter("so 9 * 2 = $18.", _GSM8K_FLEXIBLE, -1)
    '$18.'
    >>> regex_filter("no marker", _GSM8K_STRICT)
    '[invalid]'
    """
    found = pattern.findall(text if isinstance(text, str) else "")
    if not found:
        return FALLBACK
    match = found[group_select]
    if isinstance(match, tuple):
        groups = [g for g in match if g]
        match = groups[0] if groups else FALLBACK
    return match.strip()


def gsm8k_exact_match(prediction: str, solution: str) -> float:
    """lm-eval's ``exact_match`` with the GSM8K options: ``regexes_to_ignore`` applied to both
    sides in order, then ``ignore_case``; 1.0 if the strings are then equal.

    >>> gsm8k_exact_match("$1,000.", "... so 1000 in all.\\n#### 1,000")
    1.0
    """
    for pattern in _GSM8K_IGNORE:
        prediction, solution = pattern.sub("", prediction), pattern.sub("", solution)
    # numpy's fixed-width unicode strings (what lm-eval compares) drop trailing NUL characters
    return 1.0 if prediction.lower().rstrip("\x00") == solution.lower().rstrip("\x00") else 0.0


def _gsm8k_solution(item: TaskItem) -> str:
    """lm-eval's GSM8K target: the whole worked solution (``doc_to_target: "{{answer}}"``)."""
    solution = item.metadata.get("solution")
    return solution if isinstance(solution, str) else f"#### {item.reference}"


def gsm8k_strict_match(completion: str, item: TaskItem) -> float:
    """``strict-match`` of lm-eval's ``gsm8k`` task (the ``#### N`` marker)."""
    return gsm8k_exact_match(regex_filter(completion, _GSM8K_STRICT), _gsm8k_solution(item))


def gsm8k_cot_strict_match(completion: str, item: TaskItem) -> float:
    """``strict-match`` of lm-eval's ``gsm8k_cot_zeroshot`` task (``The answer is N.``)."""
    return gsm8k_exact_match(regex_filter(completion, _GSM8K_COT_STRICT), _gsm8k_solution(item))


def gsm8k_flexible_extract(completion: str, item: TaskItem) -> float:
    """``flexible-extract`` of lm-eval's GSM8K tasks (the last number-like run)."""
    return gsm8k_exact_match(regex_filter(completion, _GSM8K_FLEXIBLE, -1), _gsm8k_solution(item))


def minerva_math_verify(completion: str, item: TaskItem, verifier: MathVerifier | None = None) -> float | None:
    """``math_verify`` of lm-eval's ``minerva_math500`` task; ``None`` when the item has no
    ``solution`` in its metadata (the metric compares against the whole worked solution)."""
    solution = item.metadata.get("solution")
    if not isinstance(solution, str) or not isinstance(completion, str):
        return None if not isinstance(solution, str) else 0.0
    verifier = verifier if verifier is not None else default_verifier()
    return 1.0 if verifier.equivalent(solution, completion, raw=True) else 0.0


@dataclass(frozen=True)
class LmEvalMetric:
    """One lm-eval-compatible metric: ``key`` in results JSON, ``label`` in tables and reports."""

    key: str
    label: str
    score: Callable[[str, TaskItem], float | None]


_GSM8K = (
    LmEvalMetric("gsm8k/strict-match", "lm-eval gsm8k strict-match (#### N)", gsm8k_strict_match),
    LmEvalMetric("gsm8k_cot_zeroshot/strict-match", "lm-eval gsm8k_cot_zeroshot strict-match (The answer is N.)",
                 gsm8k_cot_strict_match),
    LmEvalMetric("gsm8k/flexible-extract", "lm-eval gsm8k flexible-extract (last number)", gsm8k_flexible_extract),
)
_BY_TASK: Mapping[str, tuple[LmEvalMetric, ...]] = {
    "gsm8k": _GSM8K,
    "math500": (LmEvalMetric("minerva_math500/math_verify", "lm-eval minerva_math500 math_verify",
                             minerva_math_verify),),
    # the seven minerva_math_* subject tasks score the full MATH test set the same way
    "math": (LmEvalMetric("minerva_math/math_verify", "lm-eval minerva_math math_verify", minerva_math_verify),),
}


def lm_eval_metrics(task_name: str) -> tuple[LmEvalMetric, ...]:
    """The lm-eval-compatible metrics of a task (empty for tasks lm-eval has no counterpart of).

    >>> [m.key for m in lm_eval_metrics("gsm8k")]
    ['gsm8k/strict-match', 'gsm8k_cot_zeroshot/strict-match', 'gsm8k/flexible-extract']
    >>> lm_eval_metrics("arith")
    ()
    """
    return _BY_TASK.get(task_name, ())

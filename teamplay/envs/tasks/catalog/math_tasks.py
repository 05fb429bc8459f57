"""MATH (Hendrycks et al., 2021) and its 500-problem subset MATH-500 (Lightman et al., 2023).

Data:
- ``math``: the full test split (5,000 problems) from the hub dataset
  ``DigitalLearningGmbH/MATH-lighteval`` (one config, fields ``problem``, ``level``, ``type``,
  ``solution``: the original release, unlike ``EleutherAI/hendrycks_math`` which is split into seven
  configs by subject), or a local file with the same fields; the train split (7,500) too.
- ``math500``: ``HuggingFaceH4/MATH-500`` (split ``test``; fields ``problem``, ``solution``,
  ``answer``, ``subject``, ``level``, ``unique_id``) or a local file with those fields.

A row needs ``problem`` and either ``answer`` or a ``solution`` holding ``\\boxed{...}``; the
reference is ``answer`` when present, else the content of the solution's last box. Items are
``{name}/{split}/{row}`` in source order; ``seed`` does not change anything. Metadata: ``level``
(an int 1-5 where the source says "Level 3" or 3, else the source's string), ``subject``
(``type`` in the original release), and ``unique_id`` and the worked ``solution`` where the
source has them.

Scoring: the completion's answer (``extract``) is, highest priority first, its last ``\\boxed{}``;
the statement after its last "answer is" / "answer:" (the minerva line ``Final Answer: The final
answer is $X$. I hope it is correct.`` gives X: the first math span, or the text to the sentence's
end); or a bare final line that is an answer rather than prose (``$\\frac{1}{2}$``, ``x = 5``). It
scores 1 when its normal form equals the reference's (cheap, no sympy) or math_verify finds them
equal within the verifier's deadline (``MathVerifier``, which asks a fresh worker once more after a
missed deadline); anything else, two missed deadlines included, scores 0. A hedge scores 0: a
statement offering a second math span with "or" ("$3$ or $4$"), or an answer holding
"or"/"either"/"maybe" that its reference does not hold (``\\boxed{3 \\text{ (or 4)}}``,
which math_verify alone would read as 3).
"""

from __future__ import annotations

import re
from typing import Any

from teamplay.envs.tasks.answers.latex import last_boxed, normalize_latex, tidy_latex
from teamplay.envs.tasks.answers.math_verifier import MathVerifier, default_verifier
from teamplay.envs.tasks.answers.text import ANSWER_IS, tail
from teamplay.envs.tasks.base import DatasetTask, register_task
from teamplay.envs.tasks.sources import HubSpec, Row
from teamplay.errors import DataError
from teamplay.records import TaskItem

_LEVEL = re.compile(r"^(?:Level\s*)?([1-5])$")
# after "answer is": spaces, a colon, bold markup, then a math span $...$, $$...$$, \(...\) or \[...\]
_LEAD = re.compile(r"[ \t]*:?[ \t]*(?:\*\*)?[ \t]*")
_MATH_SPAN = re.compile(r"\$\$(.{1,1000}?)\$\$|\$(.{1,1000}?)\$|\\\((.{1,1000}?)\\\)|\\\[(.{1,1000}?)\\\]", re.DOTALL)
# the end of a stated answer's sentence: a period before a space or the line end (not "0.5"), a newline
_SENTENCE_END = re.compile(r"\.(?=\s|$)|\n")
_HEDGE = re.compile(r"\b(?:or|either|maybe|perhaps|possibly)\b|\\lor(?![A-Za-z])", re.IGNORECASE)
# prose: two words of 2+ letters in a row that are not LaTeX commands ("so the", "is x")
_PROSE = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{2,}[ \t]+(?<![\\])[A-Za-z]{2,}")
_BARE_LINE_CHARS = 200


@register_task('math')
class MathTask(DatasetTask):
    """Competition mathematics with LaTeX answers, the full MATH test set by default."""

    name = "math"
    splits = ("train", "test")
    answer_instruction = "Put your final answer in \\boxed{}."
    hub = HubSpec("DigitalLearningGmbH/MATH-lighteval")

    def __init__(self, verifier: MathVerifier | None = None, on_bad_line: str = "error") -> None:
        """``verifier``: the math_verify client; ``None`` uses the process-wide one (one worker
        process for all tasks). ``on_bad_line``: see ``DatasetTask``."""
        super().__init__(on_bad_line)
        self._verifier = verifier

    @property
    def verifier(self) -> MathVerifier:
        return self._verifier if self._verifier is not None else default_verifier()

    def counters(self) -> dict[str, int]:
        """``verifier_deadlines_missed``: checks of this process's verifier that missed its deadline
        (each attempt; a pair scores wrong only after two), so a run shows when its rewards may have
        depended on the machine's load."""
        return {"verifier_deadlines_missed": self.verifier.timeouts}

    def row_item(self, row: Row, split: str, seed: int) -> TaskItem:
        problem = row.text("problem")
        reference = row.optional_text("answer")
        if reference is None:
            solution = row.optional_text("solution")
            reference = last_boxed(solution) if solution is not None else None
            if not reference:
                raise DataError(f"{row.where}: needs a non-empty 'answer' field or a 'solution' "
                                "containing \\boxed{...}; found neither")
        metadata: dict[str, Any] = {"level": _level(row.data.get("level"))}
        subject = row.data.get("subject", row.data.get("type"))
        if subject is not None:
            metadata["subject"] = str(subject)
        if row.data.get("unique_id") is not None:
            metadata["unique_id"] = str(row.data["unique_id"])
        if isinstance(row.data.get("solution"), str):
            metadata["solution"] = row.data["solution"]  # lm-eval's math_verify compares with it
        return TaskItem(id=f"{self.name}/{split}/{row.index}", prompt=problem, reference=reference,
                        metadata=metadata)

    def extract(self, completion: str) -> str | None:
        """The completion's answer (the module doc says where it is looked for) or ``None``.

        The answer is tidied (``tidy_latex``: ``$``, a final period, ``\\left``/``\\right`` and
        extra spaces removed, ``\\dfrac`` made ``\\frac``) so equal spellings vote together.

        >>> MathTask().extract(r"so $x = \\boxed{\\dfrac{1}{2}}$.")
        '\\\\frac{1}{2}'
        >>> MathTask().extract("The answer is $42$.")
        '42'
        >>> MathTask().extract("Final Answer: The final answer is $0.5$. I hope it is correct.")
        '0.5'
        """
        answer = last_boxed(completion)
        if answer is None:
            text = tail(completion)
            statements = list(ANSWER_IS.finditer(text))
            answer = _stated_answer(text, statements[-1].end()) if statements else _bare_final_line(text)
        return (tidy_latex(answer) or None) if answer is not None else None

    def score(self, completion: str, item: TaskItem) -> float:
        """1.0 if the completion's answer equals ``item.reference`` (see the module doc), else 0.0."""
        return self.score_answer(self.extract(completion), item)

    def score_answer(self, answer: str | None, item: TaskItem) -> float:
        """Score an extracted LaTeX answer: normal-form match first, then math_verify. Never raises.

        >>> item = TaskItem(id="math/test/0", prompt="...", reference="\\\\frac{1}{2}")
        >>> MathTask().score_answer("\\\\dfrac{1}{2}", item)
        1.0
        """
        if not isinstance(answer, str) or not answer.strip():
            return 0.0
        if _HEDGE.search(answer) and not _HEDGE.search(item.reference):
            return 0.0
        if normalize_latex(answer) == normalize_latex(item.reference):
            return 1.0
        return 1.0 if self.verifier.equivalent(item.reference, answer) else 0.0


@register_task('math500')
class Math500Task(MathTask):
    """The MATH-500 subset (``HuggingFaceH4/MATH-500``): 500 test problems with an ``answer`` field."""

    name = "math500"
    splits = ("test",)
    hub = HubSpec("HuggingFaceH4/MATH-500")


def _stated_answer(text: str, pos: int) -> str | None:
    """The answer stated at ``pos`` (just after "answer is"): the first math span if the statement
    starts with one, else the text up to the sentence's end; ``None`` when empty or a hedge.

    >>> _stated_answer("is $0.5$. I hope it is correct.", 2), _stated_answer("is 7 apples.", 2)
    ('0.5', '7 apples')
    >>> _stated_answer("is $3$ or $4$.", 2) is None
    True
    """
    start = _LEAD.match(text, pos).end()
    end_match = _SENTENCE_END.search(text, start)
    sentence = text[start:end_match.start() if end_match else len(text)]
    span = _MATH_SPAN.match(text, start)
    if span is not None:
        rest = text[span.end():end_match.start() if end_match and end_match.start() > span.end() else span.end()]
        if _HEDGE.search(rest) and _MATH_SPAN.search(rest):
            return None  # "$3$ or $4$": two answers offered
        answer = next(group for group in span.groups() if group is not None)
    else:
        answer = sentence
    answer = answer.strip().strip("*").strip()
    return answer or None


def _bare_final_line(text: str) -> str | None:
    """The last non-empty line when it is an answer, not prose: a math span filling the line
    (``$\\frac{1}{2}$``, ``\\[x = 5\\]``) or a short line without two words in a row.

    >>> _bare_final_line("We solve it.\\n\\n$\\\\frac{1}{2}$\\n"), _bare_final_line("x = 5")
    ('\\\\frac{1}{2}', 'x = 5')
    >>> _bare_final_line("So the total is 5.") is None
    True
    """
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return None
    line = lines[-1].strip("*").strip()
    span = _MATH_SPAN.fullmatch(line)
    if span is not None:
        return next(group for group in span.groups() if group is not None).strip() or None
    if len(line) > _BARE_LINE_CHARS or _PROSE.search(line):
        return None
    return line or None


def _level(value: object) -> int | str | None:
    """``"Level 3"`` or ``3`` -> 3; other values as strings (MATH has a few "Level ?")."""
    if value is None:
        return None
    match = _LEVEL.match(str(value).strip())
    return int(match.group(1)) if match else str(value)

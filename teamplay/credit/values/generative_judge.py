"""The generative reward-model characteristic function: ``v(S)`` = the verifier's score of the answer
an LLM judge writes after reading the messages of the agents in S (Parallel Shapley).

Parallel Shapley treats K parallel reasoning paths as players: a coalition's utility is what a
generative reward model makes of its paths. Here the judge reads the question and the episode's
transcript with the messages of agents outside S withheld (as in masking: headers and order kept,
the text replaced by a placeholder), writes a final answer, and the task's own extractor and verifier
score it. The judge is asked for nothing else: no probability, no verdict on the team.

* Batching: all uncached coalitions of one ``values`` call go to the judge in one ``generate`` call
  (the :class:`~teamplay.credit.values.characteristic.CharacteristicFunction` contract); values are
  cached per coalition, so a coalition is judged once per episode.
* Cost: :attr:`GenerativeJudgeScorer.generated_tokens` counts the judge's generated tokens.
* Unreadable answers: a reply in which the task's extractor finds no answer scores 0; nothing raises.
* ``v(empty)``: 0 by default (no path, nothing to aggregate, no answer); ``empty_value=None`` asks
  the judge with every message withheld instead, the "question only" value, so that the paths share
  only what they add to the judge's own answer.

The judge's reply is a function of the visible messages only, so the value of S does not depend on
the order in which coalitions are asked (given a deterministic judge: greedy decoding).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from teamplay.credit.values.characteristic import DEFAULT_PLACEHOLDER, MaskingCharacteristic, Transcript
from teamplay.records import Episode, TaskItem

#: the judge's prompt: ``{question}`` and ``{transcript}`` (the rendered, masked transcript) are
#: filled; literal braces are doubled (``str.format``)
DEFAULT_GENERATIVE_JUDGE_TEMPLATE = (
    "Question:\n{question}\n\n"
    "Solutions written by members of a team (some may be withheld):\n{transcript}\n\n"
    "Read the solutions, decide which final answer to the question is correct, and end your reply "
    "with it in the form \\boxed{{answer}}."
)


def check_judge_template(template: str) -> str:
    """``template`` when it formats with exactly the fields ``{question}`` and ``{transcript}`` (the
    latter required), else a ValueError saying what is wrong.

    >>> check_judge_template("Q: {question}\\n{transcript}\\nAnswer as \\\\boxed{{x}}.")[:2]
    'Q:'
    """
    if "{transcript}" not in template:
        raise ValueError("judge template must contain the field {transcript}")
    try:
        template.format(question="", transcript="")
    except (KeyError, IndexError, ValueError) as exc:
        raise ValueError(f"judge template does not format ({type(exc).__name__}: {exc}); its fields are "
                         "{question} and {transcript}, and literal braces are written doubled: {{ }}") from None
    return template


@dataclass(frozen=True)
class JudgeReply:
    """One judge completion.

    Fields:
        text: the decoded reply.
        tokens: tokens generated for it (0 from a judge that writes text without tokens: scripted).
    """

    text: str
    tokens: int = 0


@runtime_checkable
class GenerativeJudge(Protocol):
    """What ``value: judge`` needs from a model: one greedy completion per prompt, all in one call.

    ``generate(prompts, max_new_tokens, item)`` returns one :class:`JudgeReply` per prompt, in order.
    ``item`` is the problem, for scripted judges (a model reads the prompt only, never the item). The
    trainer's is ``teamplay.training.play.judge.BackendJudge`` (a generation backend, adapters off);
    tests use fakes.
    """

    def generate(self, prompts: Sequence[str], max_new_tokens: int,
                 item: TaskItem | None = None) -> Sequence[JudgeReply]: ...


class GenerativeJudgeScorer:
    """A :data:`~teamplay.credit.values.characteristic.TranscriptScorer`: for each transcript the judge
    writes an answer and the task scores it.

    Args:
        judge: the :class:`GenerativeJudge`.
        extract: the task's extractor, ``extract(text) -> answer | None``.
        score_answer: the task's score of an extracted answer, in [0, 1].
        template: the prompt (:data:`DEFAULT_GENERATIVE_JUDGE_TEMPLATE` when None; see
            :func:`check_judge_template`).
        max_new_tokens: the most tokens the judge writes per reply.
        item: the problem, handed to the judge for scripted judges.

    Attributes:
        generated_tokens: tokens the judge generated over every call so far.
        calls: judge calls made (one per batch of transcripts).
        last_answers: the extracted answer of each reply of the latest call (None: unreadable).
    """

    def __init__(self, judge: GenerativeJudge, extract: Callable[[str], str | None],
                 score_answer: Callable[[str], float], template: str | None = None,
                 max_new_tokens: int = 256, item: TaskItem | None = None) -> None:
        if max_new_tokens < 1:
            raise ValueError(f"judge max_new_tokens must be >= 1, got {max_new_tokens}")
        self.judge = judge
        self.extract = extract
        self.score_answer = score_answer
        self.template = check_judge_template(DEFAULT_GENERATIVE_JUDGE_TEMPLATE if template is None else template)
        self.max_new_tokens = max_new_tokens
        self.item = item
        self.generated_tokens = 0
        self.calls = 0
        self.last_answers: list[str | None] = []

    def prompts(self, transcripts: Sequence[Transcript]) -> list[str]:
        return [self.template.format(question=t.question, transcript=t.render()) for t in transcripts]

    def __call__(self, transcripts: Sequence[Transcript]) -> np.ndarray:
        """Scores float64 [len(transcripts)]: ``score_answer(extract(reply))``, 0 without an answer."""
        if not transcripts:
            return np.zeros(0)
        replies = list(self.judge.generate(self.prompts(transcripts), self.max_new_tokens, item=self.item))
        if len(replies) != len(transcripts):
            raise RuntimeError(f"judge returned {len(replies)} replies for {len(transcripts)} prompts")
        self.calls += 1
        self.generated_tokens += sum(int(r.tokens) for r in replies)
        self.last_answers = [self.extract(r.text) for r in replies]
        return np.array([0.0 if a is None else float(self.score_answer(a)) for a in self.last_answers],
                        dtype=np.float64)


class GenerativeJudgeCharacteristic(MaskingCharacteristic):
    """``v(S)`` = task score of the answer the judge writes after reading the question and the
    transcript with the messages of agents outside S withheld (module docstring).

    ``empty_value``: 0 (default: no agents, no answer) or None (the judge answers the question with
    every message withheld). Values outside ``value_range`` raise ValueError (base class).

    Attributes:
        scorer: the :class:`GenerativeJudgeScorer` (its prompts, template and counters).
        answers: the judge's extracted answer for each coalition judged so far, by mask.
    """

    def __init__(self, episode: Episode, judge: GenerativeJudge, extract: Callable[[str], str | None],
                 score_answer: Callable[[str], float], question: str = "", *, template: str | None = None,
                 max_new_tokens: int = 256, item: TaskItem | None = None,
                 placeholder: str = DEFAULT_PLACEHOLDER, empty_value: float | None = 0.0,
                 value_range: tuple[float, float] = (0.0, 1.0)) -> None:
        self.scorer = GenerativeJudgeScorer(judge, extract, score_answer, template, max_new_tokens, item)
        self.answers: dict[int, str | None] = {}
        super().__init__(episode, self.scorer, question, placeholder, empty_value, value_range)

    @property
    def generated_tokens(self) -> int:
        """Tokens the judge generated for this episode's coalitions."""
        return self.scorer.generated_tokens

    def prompt(self, mask: int) -> str:
        """The judge's prompt for coalition ``mask``."""
        return self.scorer.prompts([self.transcript(mask)])[0]

    def evaluate(self, masks: np.ndarray) -> np.ndarray:
        """The masking scores of ``masks`` [U], keeping the judge's answer of each coalition."""
        values = np.asarray(super().evaluate(masks), dtype=np.float64)
        self.answers.update(zip(masks.tolist(), self.scorer.last_answers, strict=True))
        return values

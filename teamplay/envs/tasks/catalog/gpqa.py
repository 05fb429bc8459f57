"""GPQA: graduate-level multiple-choice science questions (Rein et al., 2023), the diamond subset.

Data: the gated hub dataset ``Idavidrein/gpqa`` (config ``gpqa_diamond``; it has a single split,
``train``, which this task serves as its ``test`` split: GPQA is an evaluation set) or a local copy
of the official CSV (or a .jsonl/.parquet) with the columns ``Question``, ``Correct Answer`` and
``Incorrect Answer 1``..``3``. Items are ``gpqa/test/{row}`` in source order.

The four answers are shown in an order drawn from the question text and ``seed``: each answer's
position is the rank of ``sha256(seed, question, answer index)``, so the order is the same in every
process and Python version (unlike the salted ``hash()`` or ``random``'s algorithms) and the
correct answer lands on every letter about equally often. The prompt ends with the options as
``(A) ...`` to ``(D) ...``; the reference is the correct answer's letter.
"""

from __future__ import annotations

import hashlib

from teamplay.envs.tasks.answers.letters import LETTERS, extract_letter
from teamplay.envs.tasks.base import DatasetTask, register_task
from teamplay.envs.tasks.sources import HubSpec, Row
from teamplay.records import TaskItem

ANSWER_FIELDS = ("Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3")


def shuffle_choices(question: str, answers: tuple[str, ...], seed: int) -> list[int]:
    """The display order of ``answers``: ``order[k]`` is the index of the answer shown as letter k.

    Deterministic in (question, seed) across processes; a different seed gives another order.

    >>> shuffle_choices("Why?", ("right", "w1", "w2", "w3"), seed=0)
    [3, 2, 0, 1]
    """
    def rank(index: int) -> bytes:
        return hashlib.sha256(f"{seed}\x00{question}\x00{index}".encode("utf-8", "surrogatepass")).digest()

    return sorted(range(len(answers)), key=rank)


@register_task('gpqa')
class GpqaTask(DatasetTask):
    """GPQA diamond, four options shuffled per question and seed; reference = a letter A-D."""

    name = "gpqa"
    splits = ("test",)
    answer_instruction = "End with 'The answer is (X).' where X is one of A, B, C, D."
    hub = HubSpec("Idavidrein/gpqa", "gpqa_diamond", split_map={"test": "train"})

    def row_item(self, row: Row, split: str, seed: int) -> TaskItem:
        question = row.text("Question")
        answers = tuple(row.text(field) for field in ANSWER_FIELDS)
        order = shuffle_choices(question, answers, seed)
        choices = [answers[i] for i in order]
        options = "\n".join(f"({letter}) {choice}" for letter, choice in zip(LETTERS, choices, strict=True))
        metadata = {"choices": tuple(choices), "correct_answer": answers[0]}
        for source_field, key in (("High-level domain", "domain"), ("Subdomain", "subdomain")):
            if row.data.get(source_field):
                metadata[key] = str(row.data[source_field])
        return TaskItem(
            id=f"{self.name}/{split}/{row.index}",
            prompt=f"{question}\n\n{options}",
            reference=LETTERS[order.index(0)],  # where the correct answer (index 0) was placed
            metadata=metadata,
        )

    def extract(self, completion: str) -> str | None:
        """The chosen letter (see ``teamplay.envs.tasks.answers.letters``), or ``None``.

        >>> GpqaTask().extract("Both fit, but (C) ignores spin. Answer: **D**")
        'D'
        """
        return extract_letter(completion)

    def score(self, completion: str, item: TaskItem) -> float:
        """1.0 if the completion's chosen letter is the reference letter, else 0.0."""
        return self.score_answer(self.extract(completion), item)

    def score_answer(self, answer: str | None, item: TaskItem) -> float:
        """1.0 if ``answer`` (a letter, or text stating one) is the reference letter, else 0.0."""
        if not isinstance(answer, str):
            return 0.0
        stripped = answer.strip()
        letter = stripped if len(stripped) == 1 and stripped in LETTERS else extract_letter(answer)
        return 1.0 if letter is not None and letter == item.reference else 0.0

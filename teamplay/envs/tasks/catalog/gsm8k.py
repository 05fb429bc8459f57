"""GSM8K: grade-school math word problems with a numeric answer (Cobbe et al., 2021).

Data: the hub dataset ``openai/gsm8k`` (config ``main``, splits ``train``/``test``) or a local
``.jsonl``/``.parquet``/``.json``/``.csv`` with ``question`` and ``answer`` fields, where ``answer``
is the worked solution ending in ``#### N``. The reference is N in canonical form (commas removed:
``"1,000"`` becomes ``"1000"``). Items are ``gsm8k/{split}/{row}`` in source order; ``seed`` is
accepted for the common interface and does not change anything (shuffling is the caller's job).

Scoring: exact numeric equality of the extracted number and the reference; see
``teamplay.envs.tasks.answers.numeric`` for which number of a completion counts.
"""

from __future__ import annotations

from teamplay.envs.tasks.answers.numeric import canonical_number, parse_canonical
from teamplay.envs.tasks.base import DatasetTask, NumericAnswerTask, register_task
from teamplay.envs.tasks.sources import HubSpec, Row
from teamplay.errors import DataError
from teamplay.records import TaskItem


@register_task('gsm8k')
class Gsm8kTask(NumericAnswerTask, DatasetTask):
    """GSM8K word problems; reference = the number after ``####`` of the worked solution.

    A completion scores 1.0 when its final number equals the reference (``NumericAnswerTask``):

    >>> Gsm8kTask().extract("She pays $1,000.00 in total. The answer is 1,000.")
    '1000'
    >>> item = TaskItem(id="gsm8k/test/0", prompt="...", reference="18")
    >>> Gsm8kTask().score("9 * 2 = $18\\n#### 18", item), Gsm8kTask().score("#### 17", item)
    (1.0, 0.0)
    """

    name = "gsm8k"
    splits = ("train", "test")
    answer_instruction = "End with 'The answer is N.' where N is a number."
    hub = HubSpec("openai/gsm8k", "main")

    def row_item(self, row: Row, split: str, seed: int) -> TaskItem:
        solution = row.text("answer")
        marker = solution.rfind("####")
        value = parse_canonical(solution[marker + 4:]) if marker >= 0 else None
        if value is None:
            raise DataError(f"{row.where}: field 'answer' must end with '#### N' (N a number), "
                            f"got ...{solution[-60:]!r}")
        return TaskItem(
            id=f"{self.name}/{split}/{row.index}",
            prompt=row.text("question"),
            reference=canonical_number(value),
            metadata={"solution": solution},
        )

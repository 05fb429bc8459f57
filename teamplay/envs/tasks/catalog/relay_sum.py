"""``relay_sum``: a sum of N procedural integers, each operand a piece one teammate holds (the
``relay`` protocol).

An item is ``"What is a_1 + ... + a_N?"`` with ``metadata["operands"]`` the N operands in order and
the reference their sum. The ``relay`` protocol shows operand j to informant j alone and the
problem with every operand hidden to the answerer; a team of one solver (``single``) can play the
same items as an ordinary sum.

A task of its own rather than ``arith``'s metadata: ``arith`` items record their level and seed,
not their operands, and its levels 3-5 are not sums; here the split of the problem into pieces is
part of the item, so the protocol reads it and never parses the prompt.

Reproducibility and splits as ``arith``'s: item ``i`` of (seed, split, N, max_operand) is drawn by
a ``random.Random`` seeded with a hash of them, and a problem belongs to the test split when the
hash of its text says so (one in five), so train and test never share a problem. With N = 1 (a
team of 2: one informant, one answerer) the problem is to pass one number on. ``twins_together=True``
splits by the sorted operands instead, so a reordering of a held-out sum (the same numbers in other
hands) is never a training problem, and ``distinct`` keys reorderings as one problem.
"""

from __future__ import annotations

import random
from pathlib import Path

from teamplay.envs.tasks.base import NumericAnswerTask, register_task
from teamplay.envs.tasks.catalog.arith import DEFAULT_SIZE, _digest, split_of, sum_twin_key
from teamplay.envs.tasks.sources import check_load_args
from teamplay.errors import ConfigError
from teamplay.records import TaskItem

#: most operands per item (the relay protocol's informants are bounded the same way)
MAX_OPERANDS = 16
#: redraws of one item before its split is declared too small to hold it (a split holds one
#: problem in five, so a problem space of a few hundred problems ends in a few draws)
_MAX_DRAWS = 1000


def _positive_int(value: object, field: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(f"relay_sum: {field} must be an integer from {low} to {high}, got {value!r}")
    return value


@register_task("relay_sum")
class RelaySumTask(NumericAnswerTask):
    """Sums of ``n_operands`` integers from 1 to ``max_operand`` (module docstring).

    >>> item = RelaySumTask(n_operands=3).load("test", limit=1)[0]
    >>> sum(item.metadata["operands"]) == int(item.reference), len(item.metadata["operands"])
    (True, 3)
    """

    name = "relay_sum"
    splits = ("train", "test")
    answer_instruction = "End with 'The answer is N.' where N is a number."

    def __init__(self, n_operands: int = 2, max_operand: int = 99, twins_together: bool = False) -> None:
        """``n_operands``: N, 1 to :data:`MAX_OPERANDS` (a relay team has N informants);
        ``max_operand``: the largest operand, 2 to 1,000,000; ``twins_together``: split and
        deduplicate by the unordered operands (module docstring)."""
        self.n_operands = _positive_int(n_operands, "n_operands", 1, MAX_OPERANDS)
        self.max_operand = _positive_int(max_operand, "max_operand", 2, 10**6)
        if not isinstance(twins_together, bool):
            raise ConfigError(f"relay_sum: twins_together must be true or false, got {twins_together!r}")
        self.twins_together = twins_together

    @property
    def operands_per_item(self) -> int:
        """N: the operands each item holds (what the ``relay`` protocol checks against its team)."""
        return self.n_operands

    def load(self, split: str = "test", source: str | Path | None = None, limit: int | None = None,
             seed: int = 0) -> list[TaskItem]:
        """Items 0..limit-1 of (seed, split); ``limit=None``: ``DEFAULT_SIZE[split]`` items. The set
        is generated: a ``source`` is refused."""
        check_load_args(self.name, split, self.splits, limit)
        if source is not None:
            raise ConfigError(f"relay_sum: the set is generated and reads no files; drop source={str(source)!r}")
        return [self.item(split, seed, index) for index in range(DEFAULT_SIZE[split] if limit is None else limit)]

    def item(self, split: str, seed: int, index: int) -> TaskItem:
        """Item ``index`` of (seed, split), generated on its own (no earlier items needed)."""
        n, top = self.n_operands, self.max_operand
        twins = ("twins",) if self.twins_together else ()  # the default keeps its seeds and ids
        rng = random.Random(_digest("relay_sum", seed, split, n, top, index, *twins))
        for _ in range(_MAX_DRAWS):
            operands = tuple(rng.randint(1, top) for _ in range(n))
            prompt = f"What is {' + '.join(map(str, operands))}?"
            if split_of(sum_twin_key(operands) if twins else prompt) == split:
                return TaskItem(id=f"relay_sum/n{n}/m{top}{'/t' if twins else ''}/s{seed}/{split}/{index}",
                                prompt=prompt,
                                reference=str(sum(operands)),
                                metadata={"operands": operands, "seed": seed, "index": index})
        raise ConfigError(f"relay_sum: no {split} problem found in {_MAX_DRAWS} draws with n_operands={n}, "
                          f"max_operand={top}; raise max_operand")

    def twin_key(self, item: TaskItem) -> str:
        """With ``twins_together``, every reordering of a sum's operands shares one key; otherwise the
        prompt (``Task.twin_key``)."""
        return sum_twin_key(tuple(item.metadata["operands"])) if self.twins_together else item.prompt

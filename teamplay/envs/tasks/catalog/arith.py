"""arith: procedural arithmetic problems, the embedded default data (no download, no files).

Levels (integer answers throughout):
    1: a sum of two numbers of 1-2 digits            "What is 47 + 8?"
    2: three 1-2 digit terms with + and -            "What is 47 + 8 - 90?"
    3: a product plus or minus a term                "What is 7 * 23 + 15?"
    4: two operations with parentheses               "What is (12 + 30) * 4 - 17?"
    5: a two- or three-step word problem             "Ada has 12 marbles. ..."

API: ``ArithTask(level=1)``; ``get_task("arith")`` is level 1 and ``get_task("arith", level=3)``
level 3. ``load(split, source="level=3")`` overrides the level for one call (``source`` takes no
path: the set has no files). The set is unlimited: ``limit`` is the number of items, and
``limit=None`` means ``DEFAULT_SIZE[split]`` (10,000 train, 500 test).

Reproducibility: item ``i`` of (seed, split, level) is drawn by a ``random.Random`` seeded with
``sha256(seed, split, level, i)``, never from global RNG state, so it is the same in every run and
process and does not depend on ``limit`` (the first 10 items of ``limit=100`` are ``limit=10``).

Train and test never share a problem: the problem space is split once by a hash of the problem text
(one in five problems is a test problem, whatever the seed), and each split's generator redraws
until it lands in its own part. Within a split a problem can repeat in a large set: level 1 has
only 99 * 99 sums. The text split puts about four in five commuted twins (``b + a`` for a test
problem ``a + b``) in the training split; ``twins_together=True`` splits level 1 by the sum's
unordered operands instead (``twin_key``), so a sum and its twin always share a split and a held-out
set has no twin in training (other levels keep the text split; the item ids say which split rule made
them, so the default sets never change).
"""

from __future__ import annotations

import hashlib
import logging
import random
import re
from collections.abc import Callable
from pathlib import Path

from teamplay.envs.tasks.base import NumericAnswerTask, register_task
from teamplay.envs.tasks.sources import check_load_args
from teamplay.errors import ConfigError
from teamplay.records import TaskItem

logger = logging.getLogger(__name__)

LEVELS = (1, 2, 3, 4, 5)
DEFAULT_SIZE = {"train": 10_000, "test": 500}
#: one problem in TEST_SHARE belongs to the test split
TEST_SHARE = 5
_SOURCE = re.compile(r"^\s*level\s*=\s*(\d+)\s*$")

_NAMES = ("Ada", "Ben", "Chen", "Dana", "Eli", "Fatima", "Goran", "Hana", "Ivan", "Jia", "Kofi", "Lena")
_THINGS = ("apples", "marbles", "stickers", "pencils", "cards", "shells")


def _digest(*parts: object) -> int:
    text = "\x00".join(str(p) for p in parts)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def split_of(prompt: str) -> str:
    """The split a problem belongs to, fixed by its text for every seed and level."""
    return "test" if _digest("arith-split", prompt) % TEST_SHARE == 0 else "train"


def sum_twin_key(operands: tuple[int, ...]) -> str:
    """One text for a sum and every reordering of its operands (the sum of the sorted operands as a
    problem text), so that ``split_of(sum_twin_key(...))`` sends commuted twins to one split."""
    return f"What is {' + '.join(str(x) for x in sorted(operands))}?"


_LEVEL1 = re.compile(r"^What is (\d+) \+ (\d+)\?$")


# -- one generator per level: rng -> (prompt, answer) --

def _level1(rng: random.Random, top: int = 99) -> tuple[str, int]:
    a, b = rng.randint(1, top), rng.randint(1, top)
    return f"What is {a} + {b}?", a + b


def _level2(rng: random.Random, top: int = 99) -> tuple[str, int]:
    a, b, c = rng.randint(1, top), rng.randint(1, top), rng.randint(1, top)
    op1, op2 = rng.choice("+-"), rng.choice("+-")
    b_signed = b if op1 == "+" else -b
    c_signed = c if op2 == "+" else -c
    return f"What is {a} {op1} {b} {op2} {c}?", a + b_signed + c_signed


def _level3(rng: random.Random) -> tuple[str, int]:
    a, b, c = rng.randint(2, 12), rng.randint(2, 99), rng.randint(1, 99)
    if rng.random() < 0.5:
        return f"What is {a} * {b} + {c}?", a * b + c
    return f"What is {a} * {b} - {c}?", a * b - c


def _level4(rng: random.Random) -> tuple[str, int]:
    a, b, d = rng.randint(1, 99), rng.randint(1, 99), rng.randint(1, 99)
    c = rng.randint(2, 12)
    form = rng.randrange(3)
    if form == 0:
        return f"What is ({a} + {b}) * {c} - {d}?", (a + b) * c - d
    e = rng.randint(2, 12)
    if form == 1:
        return f"What is {c} * {a} - {e} * {b}?", c * a - e * b
    return f"What is ({a} - {b}) * ({c} + {e})?", (a - b) * (c + e)


def _level5(rng: random.Random) -> tuple[str, int]:
    name, things = rng.choice(_NAMES), rng.choice(_THINGS)
    form = rng.randrange(4)
    if form == 0:
        a, boxes, each = rng.randint(5, 60), rng.randint(2, 9), rng.randint(2, 12)
        away = rng.randint(1, a + boxes * each - 1)
        return (f"{name} has {a} {things}. {name} buys {boxes} boxes with {each} {things} in each box "
                f"and then gives away {away} {things}. How many {things} does {name} have now?",
                a + boxes * each - away)
    if form == 1:
        price, count = rng.randint(2, 20), rng.randint(2, 9)
        bill = next(b for b in (50, 100, 200) if b > price * count)
        return (f"A shop sells {things} for ${price} each. {name} buys {count} of them and pays with a "
                f"${bill} bill. How many dollars of change does {name} get?", bill - price * count)
    if form == 2:
        s1, h1, s2, h2 = rng.randint(20, 90), rng.randint(2, 6), rng.randint(20, 90), rng.randint(2, 6)
        return (f"A train travels at {s1} km per hour for {h1} hours, then at {s2} km per hour for "
                f"{h2} hours. How many kilometres does it travel in total?", s1 * h1 + s2 * h2)
    friends, share = rng.randint(2, 6), rng.randint(2, 15)
    total = friends * share
    # total is composite (friends, share >= 2), so it has a divisor k with 2 <= k < total
    bags = rng.choice([k for k in range(2, total) if total % k == 0])
    return (f"{name} has {bags} bags with {total // bags} {things} in each bag and shares all of them "
            f"equally among {friends} friends. How many {things} does each friend get?", share)


_GENERATORS: dict[int, Callable[[random.Random], tuple[str, int]]] = {
    1: _level1, 2: _level2, 3: _level3, 4: _level4, 5: _level5,
}


@register_task('arith')
class ArithTask(NumericAnswerTask):
    """Procedural integer arithmetic at one difficulty level (1-5); see the module doc.

    Answers are read and scored as GSM8K's (``NumericAnswerTask``):

    >>> ArithTask().extract("47 + 8 = 55. The answer is 55.")
    '55'
    """

    name = "arith"
    splits = ("train", "test")
    answer_instruction = "End with 'The answer is N.' where N is a number."

    def __init__(self, level: int = 1, max_operand: int = 99, twins_together: bool = False) -> None:
        """``max_operand`` bounds the operands of the sums of levels 1 and 2 (default 99: 1-2 digit
        numbers); a smaller bound makes an easier curriculum, e.g. ``max_operand=20`` for a small
        model. Levels 3-5 ignore it. ``twins_together``: split level 1 by the unordered operands, so
        a sum's commuted twin is never in the other split, and key twins as one problem for
        ``distinct`` (module docstring)."""
        self.level = _check_level(level, "level")
        if isinstance(max_operand, bool) or not isinstance(max_operand, int) or not 2 <= max_operand <= 10**6:
            raise ConfigError(f"arith: max_operand must be an integer from 2 to 1000000, got {max_operand!r}")
        if not isinstance(twins_together, bool):
            raise ConfigError(f"arith: twins_together must be true or false, got {twins_together!r}")
        self.max_operand = max_operand
        self.twins_together = twins_together

    def load(self, split: str = "test", source: str | Path | None = None, limit: int | None = None,
             seed: int = 0) -> list[TaskItem]:
        """Items 0..limit-1 of (seed, split, level); ``source="level=K"`` picks level K."""
        check_load_args(self.name, split, self.splits, limit)
        level = self.level if source is None else _level_from_source(source)
        if limit is None:
            limit = DEFAULT_SIZE[split]
            logger.info("arith: limit=None, generating the default %d %s items", limit, split)
        return [self.item(split, level, seed, index) for index in range(limit)]

    def item(self, split: str, level: int, seed: int, index: int) -> TaskItem:
        """Item ``index`` of (seed, split, level), generated on its own (no earlier items needed)."""
        bounded = level in (1, 2) and self.max_operand != 99
        twins = self.twins_together and level == 1
        # the default bound and split rule keep the original seeds and ids, so existing item sets never change
        extra = (f"m{self.max_operand}",) if bounded else ()
        extra += ("twins",) if twins else ()
        rng = random.Random(_digest("arith", seed, split, level, index, *extra))
        generate = _GENERATORS[level]
        while True:  # ends quickly: a draw lands in "test" with probability 1/5, "train" 4/5
            prompt, answer = generate(rng, self.max_operand) if level in (1, 2) else generate(rng)
            if split_of(self._twin_text(prompt) if twins else prompt) == split:
                break
        tag = (f"/m{self.max_operand}" if bounded else "") + ("/t" if twins else "")
        return TaskItem(id=f"arith/L{level}{tag}/s{seed}/{split}/{index}", prompt=prompt, reference=str(answer),
                        metadata={"level": level, "seed": seed, "index": index, "max_operand": self.max_operand})


    def twin_key(self, item: TaskItem) -> str:
        """With ``twins_together``, a level-1 sum and its commuted twin share one key; otherwise the
        prompt (``Task.twin_key``)."""
        if self.twins_together and item.metadata.get("level") == 1:
            return self._twin_text(item.prompt)
        return item.prompt

    @staticmethod
    def _twin_text(prompt: str) -> str:
        match = _LEVEL1.match(prompt)
        return sum_twin_key((int(match.group(1)), int(match.group(2)))) if match else prompt


def _check_level(level: object, field: str) -> int:
    if isinstance(level, bool) or not isinstance(level, int) or level not in LEVELS:
        raise ConfigError(f"arith: {field} must be one of {', '.join(map(str, LEVELS))}, got {level!r}")
    return level


def _level_from_source(source: str | Path) -> int:
    match = _SOURCE.match(str(source))
    if not match:
        raise ConfigError(f"arith: source must be 'level=K' with K in 1-5 (arith is generated, it reads "
                          f"no files), got {str(source)!r}")
    return _check_level(int(match.group(1)), "source level")

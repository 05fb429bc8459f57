"""arith: correct answers, reproducible across runs and processes, disjoint splits, level API."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from teamplay.envs.tasks import get_task
from teamplay.envs.tasks.catalog.arith import DEFAULT_SIZE, ArithTask, split_of
from teamplay.errors import ConfigError

LEVELS = (1, 2, 3, 4, 5)


def _dump(level: int, seed: int, split: str = "test", limit: int = 30) -> list[dict]:
    return [i.to_dict() for i in ArithTask(level).load(split, limit=limit, seed=seed)]


@pytest.mark.parametrize("level", LEVELS)
def test_same_seed_same_items_different_seed_different_items(level: int) -> None:
    assert _dump(level, seed=0) == _dump(level, seed=0)
    a = [d["prompt"] for d in _dump(level, seed=0)]
    b = [d["prompt"] for d in _dump(level, seed=1)]
    assert sum(x != y for x, y in zip(a, b, strict=True)) >= 25  # 30 items, collisions are rare


def test_items_are_identical_in_a_fresh_process() -> None:
    code = ("import json; from teamplay.envs.tasks.catalog.arith import ArithTask; "
            "print(json.dumps({L: [i.to_dict() for i in ArithTask(L).load('train', limit=20, seed=7)] "
            "for L in range(1, 6)}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "99", "PATH": ""}, timeout=60)
    theirs = json.loads(out.stdout)
    assert theirs == {str(L): _dump(L, seed=7, split="train", limit=20) for L in LEVELS}


def test_prefix_property() -> None:
    # item i does not depend on limit
    assert _dump(3, seed=0, limit=5) == _dump(3, seed=0, limit=30)[:5]


@pytest.mark.parametrize("level", LEVELS)
def test_train_and_test_never_share_a_problem(level: int) -> None:
    test = {d["prompt"] for s in (0, 1) for d in _dump(level, seed=s, split="test", limit=300)}
    train = {d["prompt"] for s in (0, 1) for d in _dump(level, seed=s, split="train", limit=1500)}
    assert not test & train
    assert all(split_of(p) == "test" for p in test) and all(split_of(p) == "train" for p in train)


# The references are checked by evaluating the arithmetic in the prompt with Python's own parser
# (levels 1-4), an independent computation of the same value.
@pytest.mark.parametrize("level", (1, 2, 3, 4))
def test_expression_references_are_correct(level: int) -> None:
    for item in ArithTask(level).load("test", limit=200, seed=5):
        expression = re.fullmatch(r"What is (.+)\?", item.prompt).group(1)
        assert re.fullmatch(r"[0-9+\-*() ]+", expression)
        assert int(item.reference) == eval(expression, {"__builtins__": {}})  # noqa: S307 - digits only


def test_level1_is_a_sum_of_small_numbers() -> None:
    for item in ArithTask(1).load("train", limit=200):
        a, b = map(int, re.fullmatch(r"What is (\d+) \+ (\d+)\?", item.prompt).groups())
        assert 1 <= a <= 99 and 1 <= b <= 99


def test_level5_word_problems() -> None:
    items = ArithTask(5).load("test", limit=200, seed=2)
    for item in items:
        assert item.prompt.endswith("?") and int(item.reference) >= 0
        assert item.metadata["level"] == 5
    # all four templates appear
    kinds = {("change" in i.prompt, "train" in i.prompt, "friends" in i.prompt) for i in items}
    assert len(kinds) == 4


def test_level5_hand_checked_item() -> None:
    # recompute one word problem from its own numbers, whatever template it is
    for item in ArithTask(5).load("test", limit=40, seed=0):
        n = list(map(int, re.findall(r"\d+", item.prompt)))
        if "boxes" in item.prompt:        # a + boxes * each - away
            expected = n[0] + n[1] * n[2] - n[3]
        elif "change" in item.prompt:     # bill - price * count
            expected = n[2] - n[0] * n[1]
        elif "train" in item.prompt:      # s1 * h1 + s2 * h2
            expected = n[0] * n[1] + n[2] * n[3]
        else:                             # bags * per_bag / friends
            expected = n[0] * n[1] // n[2]
            assert n[0] * n[1] % n[2] == 0
        assert int(item.reference) == expected, item.prompt


def test_level_api() -> None:
    assert get_task("arith").level == 1
    assert get_task("arith", level=4).level == 4
    by_source = get_task("arith").load("test", source="level=3", limit=10)
    assert [i.to_dict() for i in by_source] == _dump(3, seed=0, limit=10)
    assert by_source[0].id == "arith/L3/s0/test/0"
    with pytest.raises(ConfigError, match="level must be one of 1, 2, 3, 4, 5, got 6"):
        ArithTask(6)
    with pytest.raises(ConfigError, match="source must be 'level=K'"):
        get_task("arith").load("test", source="data/arith.jsonl")
    with pytest.raises(ConfigError, match="source level must be one of"):
        get_task("arith").load("test", source="level=9")


def test_limit_none_gives_the_default_size() -> None:
    assert len(ArithTask(2).load("test")) == DEFAULT_SIZE["test"] == 500


def test_scoring() -> None:
    task = ArithTask(1)
    item = task.load("test", limit=1)[0]
    assert task.score(f"Adding them gives {item.reference}. The answer is {item.reference}.", item) == 1.0
    assert task.score(f"The answer is {int(item.reference) + 1}.", item) == 0.0


def test_max_operand_bounds_the_sums_of_levels_1_and_2():
    for level in (1, 2):
        items = get_task("arith", level=level, max_operand=20).load("train", limit=200)
        operands = [int(x) for item in items for x in re.findall(r"\d+", item.prompt)]
        assert max(operands) <= 20 and min(operands) >= 1
        assert all(f"/L{level}/m20/" in item.id for item in items)
        # the references are still the values of the expressions
        assert all(eval(item.prompt[len("What is "):-1]) == int(item.reference) for item in items)
    # the default bound gives exactly the default items
    assert get_task("arith", max_operand=99).load("test", limit=20) == get_task("arith").load("test", limit=20)
    with pytest.raises(ConfigError, match="max_operand"):
        get_task("arith", max_operand=1)

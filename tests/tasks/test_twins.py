"""A held-out set with no twin in training: ``twins_together`` (arith, relay_sum) and ``distinct``
(tuples, ``TaskConfig.distinct``) key a sum and its commuted twin as one problem."""

from __future__ import annotations

import pytest

from teamplay.config import TaskConfig
from teamplay.envs.tasks import get_task
from teamplay.envs.tasks.catalog.arith import ArithTask, sum_twin_key
from teamplay.errors import ConfigError
from teamplay.training.wiring.envs import load_items


def operands(prompt: str) -> tuple[int, ...]:
    return tuple(int(x) for x in prompt.removeprefix("What is ").removesuffix("?").split(" + "))


def unordered(prompt: str) -> tuple[int, ...]:
    return tuple(sorted(operands(prompt)))


def test_text_split_leaves_commuted_twins_in_training_and_twins_together_does_not() -> None:
    # the audit's finding: split by the text, most held-out sums have their twin in training
    plain = get_task("arith", level=1, max_operand=40)
    twins = get_task("arith", level=1, max_operand=40, twins_together=True)
    for task, leaked in ((plain, True), (twins, False)):
        train = {unordered(i.prompt) for i in task.load("train", limit=3000)}
        test = {unordered(i.prompt) for i in task.load("test", limit=None)}
        assert bool(test & train) is leaked
    # and the plain split loses many: more than half of its distinct test sums have a twin in training
    train = {unordered(i.prompt) for i in plain.load("train", limit=3000)}
    test = {unordered(i.prompt) for i in plain.load("test", limit=None)}
    assert len(test & train) > len(test) / 2


def test_twin_key_joins_reorderings_only_when_asked() -> None:
    twins = ArithTask(level=1, max_operand=40, twins_together=True)
    items = twins.load("test", limit=None)
    by_key: dict[str, set[tuple[int, ...]]] = {}
    for item in items:
        by_key.setdefault(twins.twin_key(item), set()).add(unordered(item.prompt))
    assert all(len(sums) == 1 for sums in by_key.values())
    assert any(twins.twin_key(i) != i.prompt for i in items)  # some items are written b + a, b > a
    plain = ArithTask(level=1, max_operand=40)
    assert all(plain.twin_key(i) == i.prompt for i in plain.load("test", limit=20))
    assert sum_twin_key((31, 4, 17)) == "What is 4 + 17 + 31?"


def test_default_items_are_unchanged_by_the_option() -> None:
    # the default split rule keeps its ids and items: existing runs' data never change
    plain = ArithTask(level=1, max_operand=40).load("test", limit=5)
    again = ArithTask(level=1, max_operand=40, twins_together=False).load("test", limit=5)
    assert plain == again
    assert all("/t/" not in i.id for i in plain)
    assert all("/t/" in i.id for i in ArithTask(level=1, max_operand=40, twins_together=True).load("test", limit=5))


def test_distinct_tuples_repeat_no_problem_and_hold_every_distinct_one() -> None:
    options = {"level": 1, "max_operand": 40, "twins_together": True}
    base = ArithTask(**options)
    keys = {base.twin_key(i) for i in base.load("test", limit=None)}
    for k in (4, 8):
        tuples = get_task("tuples", task="arith", k=k, options=options, distinct=True).load("test")
        parts = [p["prompt"] for t in tuples for p in t.metadata["parts"]]
        seen = [sum_twin_key(operands(p)) for p in parts]
        assert len(seen) == len(set(seen))
        assert len(parts) == len(keys) // k * k  # all distinct problems, but a remainder under K
    with pytest.raises(ConfigError, match="distinct must be true or false"):
        get_task("tuples", task="arith", k=2, distinct="yes")


def test_relay_sum_twins_together_splits_and_dedupes_by_the_unordered_operands() -> None:
    task = get_task("relay_sum", n_operands=2, max_operand=40, twins_together=True)
    train = {tuple(sorted(i.metadata["operands"])) for i in task.load("train", limit=3000)}
    test = task.load("test", limit=None)
    assert not {tuple(sorted(i.metadata["operands"])) for i in test} & train
    cfg = TaskConfig(name="relay_sum", split="test", distinct=True,
                     options={"n_operands": 2, "max_operand": 40, "twins_together": True})
    _, items = load_items(cfg)
    unordered_sums = [tuple(sorted(i.metadata["operands"])) for i in items]
    assert len(unordered_sums) == len(set(unordered_sums)) == len({task.twin_key(i) for i in test})
    with pytest.raises(ConfigError, match="twins_together must be true or false"):
        get_task("relay_sum", twins_together=1)

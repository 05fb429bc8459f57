"""``task.distinct``: the first ``limit`` distinct problems of a split, or a clear error when the split
has fewer (a held-out set of N distinct problems, not N draws that repeat)."""

from __future__ import annotations

import pytest

from teamplay.config import TaskConfig
from teamplay.errors import ConfigError
from teamplay.training.wiring.envs import load_items

SMALL = {"level": 1, "max_operand": 12}  # 144 sums, about 1 in 5 a test problem


def test_distinct_items_are_the_first_unrepeated_problems_in_order():
    _, plain = load_items(TaskConfig(name="arith", split="test", limit=200, options=SMALL))
    assert len({i.prompt for i in plain}) < 200  # the plain set repeats problems
    _, distinct = load_items(TaskConfig(name="arith", split="test", limit=20, distinct=True, options=SMALL))
    prompts = [i.prompt for i in distinct]
    assert len(prompts) == len(set(prompts)) == 20
    first_seen = list(dict.fromkeys(i.prompt for i in plain))[:20]
    assert prompts == first_seen
    _, unlimited = load_items(TaskConfig(name="arith", split="test", distinct=True, options=SMALL))
    assert [i.prompt for i in unlimited[:20]] == prompts and len(unlimited) == len({i.prompt for i in unlimited})


def test_asking_for_more_distinct_problems_than_the_split_has_is_refused():
    _, unlimited = load_items(TaskConfig(name="arith", split="test", distinct=True, options=SMALL))
    with pytest.raises(ConfigError, match=f"limit 200 with distinct: true, but the split has only {len(unlimited)} "
                                          f"distinct problems"):
        load_items(TaskConfig(name="arith", split="test", limit=200, distinct=True, options=SMALL))

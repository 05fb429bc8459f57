"""Private shards: which training problems each site holds.

``iid``: the pool is shuffled with the seed and dealt round robin, so every site sees the same mix.
``by_key``: non-IID by a metadata key (``level`` for arith and MATH, ``subject`` for MATH): the
pool is sorted by (key value, item id) and cut into K contiguous shards of near-equal size, so each
site holds one or two values of the key (label skew). A problem is in exactly one shard.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from teamplay.errors import ConfigError
from teamplay.records import TaskItem


def problem_type(item: TaskItem, key: str | None) -> str:
    """The item's type for calibration: its ``metadata[key]`` as text, or "all" without a key."""
    if key is None:
        return "all"
    return str(item.metadata.get(key, "none"))


def partition(items: Sequence[TaskItem], clients: int, how: Literal["iid", "by_key"], key: str | None,
              seed: int) -> list[list[TaskItem]]:
    """K shards of ``items`` (see the module doc); every shard is non-empty."""
    if clients > len(items):
        raise ConfigError(f"federated.clients: {clients} sites but only {len(items)} training problems; "
                          f"raise task.limit or lower federated.clients")
    if how == "iid":
        order = np.random.default_rng([seed, 7]).permutation(len(items))
        return [[items[int(i)] for i in order[k::clients]] for k in range(clients)]
    if key is None:
        raise ConfigError("federated.partition_key: partition by_key needs a metadata key, e.g. level")
    missing = [it.id for it in items if key not in it.metadata]
    if missing:
        raise ConfigError(f"federated.partition_key: {len(missing)} problems have no metadata {key!r} "
                          f"(first: {missing[0]}); arith has 'level', MATH has 'level' and 'subject'")
    ranked = sorted(items, key=lambda it: (str(it.metadata[key]), it.id))
    bounds = np.linspace(0, len(ranked), clients + 1).round().astype(int)
    return [ranked[bounds[k]:bounds[k + 1]] for k in range(clients)]

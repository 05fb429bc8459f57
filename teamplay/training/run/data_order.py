"""The order a run visits its training problems: a seeded permutation per pass over the set, so
a resumed run (its ``TrainerState`` holds the order and the position in it) draws exactly the
problems the uninterrupted run would have drawn; and the seed of each step's rollouts
(``step_seed``), the same whichever source generates them."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from teamplay.records import TaskItem
from teamplay.training.store.checkpoint import TrainerState


def step_seed(seed: int, step: int) -> int:
    """The sampling seed of step ``step``'s rollouts in a run seeded ``seed`` (0-based ``step``): the
    synchronous step and the asynchronous generator draw the same episodes for the same step."""
    return seed * 1_000_003 + step


def data_order(seed: int, size: int, epoch: int) -> tuple[int, ...]:
    """The permutation of ``range(size)`` pass ``epoch`` of a run seeded ``seed`` visits."""
    return tuple(int(i) for i in np.random.default_rng([seed, epoch]).permutation(size))


def first_state(seed: int, size: int) -> TrainerState:
    """A fresh run's state: step 0, at the start of pass 0."""
    return TrainerState(step=0, data_order=data_order(seed, size, 0), data_cursor=0, data_epoch=0)


def next_problems(state: TrainerState, items: Sequence[TaskItem], seed: int,
                  n: int) -> tuple[list[TaskItem], TrainerState]:
    """The next ``n`` problems from ``state``'s position (a new pass, reshuffled, when one ends) and
    the state after them."""
    order, cursor, epoch = state.data_order, state.data_cursor, state.data_epoch
    picked = []
    while len(picked) < n:
        if cursor >= len(order):
            epoch += 1
            order, cursor = data_order(seed, len(items), epoch), 0
        picked.append(items[order[cursor]])
        cursor += 1
    return picked, dataclasses.replace(state, data_order=order, data_cursor=cursor, data_epoch=epoch)

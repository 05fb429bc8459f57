"""The restart budget every rollout pool spends (``spend_restart``): ``max_restarts`` restarts per
run call are recorded, the next one fails the step naming the worker, its base and the setting."""

from __future__ import annotations

import pytest

from teamplay.distributed.rollout import RestartEvent, spend_restart


def test_the_budget_records_restarts_then_fails_the_step_with_one_line():
    events: list[RestartEvent] = []
    first, second = RestartEvent(0, 11, 2, "ActorDiedError"), RestartEvent(1, 12, 2, "ActorDiedError")
    spend_restart(events, 2, first, RuntimeError("gone"))
    spend_restart(events, 2, second, RuntimeError("gone"))
    assert events == [first, second]
    with pytest.raises(RuntimeError) as info:
        spend_restart(events, 2, RestartEvent(0, 13, 1, "ActorDiedError"), RuntimeError("gone again"))
    assert str(info.value) == ("rollout worker 0 died and the step already restarted 2 worker(s) "
                               "(distributed.max_restarts=2): gone again")
    assert len(events) == 2


def test_a_worker_of_a_base_group_is_named_with_its_base_and_zero_allows_none():
    with pytest.raises(RuntimeError, match=r"^rollout worker 3 of base 'tiny-a' died and the step already "
                                           r"restarted 0 worker\(s\) \(distributed.max_restarts=0\): boom$"):
        spend_restart([], 0, RestartEvent(3, 14, 5, "ActorDiedError", base="tiny-a"), RuntimeError("boom"))

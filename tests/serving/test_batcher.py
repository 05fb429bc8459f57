"""The micro-batcher alone (no HTTP): batch sizes, order, a failing payload, a caller that gave up,
and the queue bound."""

from __future__ import annotations

import asyncio
import time

import pytest

from teamplay.serving.batcher import BatcherClosed, MicroBatcher, QueueFull


def _batcher(run_batch, **limits) -> MicroBatcher:
    return MicroBatcher(run_batch, **{"max_batch": 8, "max_wait_s": 0.01, "max_queue": 16, **limits})


def test_batches_fill_up_to_max_batch_in_order_and_never_split_a_payload():
    seen = []

    def run_batch(payloads):
        seen.append(list(payloads))
        return [p.upper() for p in payloads]

    async def main():
        batcher = _batcher(run_batch)
        await batcher.start()
        sizes = {"a": 3, "b": 3, "c": 3, "d": 3, "e": 1, "f": 9}
        results = await asyncio.gather(*(batcher.submit(p, size) for p, size in sizes.items()))
        await batcher.close()
        return results

    assert asyncio.run(main()) == ["A", "B", "C", "D", "E", "F"]
    # 3 + 3 = 6 (a third 3 would make 9 > 8); then 3 + 3 + 1 = 7; "f" (9) alone, never split
    assert seen == [["a", "b"], ["c", "d", "e"], ["f"]]


def test_a_failing_payload_fails_alone():
    def run_batch(payloads):
        if "bad" in payloads:
            raise ValueError("bad payload")
        return [p * 2 for p in payloads]

    async def main():
        batcher = _batcher(run_batch)
        await batcher.start()
        results = await asyncio.gather(*(batcher.submit(p) for p in ("x", "bad", "y")), return_exceptions=True)
        await batcher.close()
        return results

    x, bad, y = asyncio.run(main())
    assert (x, y) == ("xx", "yy") and isinstance(bad, ValueError)


def test_a_payload_whose_caller_gave_up_is_not_run_and_the_queue_is_bounded():
    ran = []

    def run_batch(payloads):
        ran.extend(payloads)
        time.sleep(0.2)
        return payloads

    async def main():
        batcher = _batcher(run_batch, max_batch=1, max_wait_s=0.0, max_queue=1)
        await batcher.start()
        first = asyncio.create_task(batcher.submit("first"))
        await asyncio.sleep(0.05)  # "first" is running in the worker thread
        gone = asyncio.create_task(asyncio.wait_for(batcher.submit("gone"), 0.05))
        await asyncio.sleep(0.01)  # "gone" is queued
        with pytest.raises(QueueFull):  # "gone" holds the one queue place
            await batcher.submit("refused")
        with pytest.raises(TimeoutError):
            await gone
        assert await first == "first"
        assert await batcher.submit("last") == "last"
        await batcher.close()

    asyncio.run(main())
    assert ran == ["first", "last"]


def test_a_caller_that_gives_up_frees_its_queue_place_at_once_and_cancel_fails_everything():
    release = []

    def run_batch(payloads):
        while not release:
            time.sleep(0.01)
        return payloads

    async def main():
        batcher = _batcher(run_batch, max_batch=1, max_wait_s=0.0, max_queue=1)
        await batcher.start()
        first = asyncio.create_task(batcher.submit("first"))
        await asyncio.sleep(0.05)  # "first" runs
        gone = asyncio.create_task(batcher.submit("gone"))
        await asyncio.sleep(0.01)
        assert (batcher.queued, batcher.running) == (1, 1)
        gone.cancel()
        await asyncio.sleep(0)
        assert batcher.queued == 0  # not when the running batch ends: now
        kept = asyncio.create_task(batcher.submit("kept"))  # the freed place takes a new payload
        await asyncio.sleep(0.01)
        batcher.cancel("stopping")
        results = await asyncio.gather(first, kept, return_exceptions=True)
        release.append(True)
        await batcher.close()
        return results

    first, kept = asyncio.run(main())
    assert isinstance(first, BatcherClosed) and isinstance(kept, BatcherClosed) and str(kept) == "stopping"

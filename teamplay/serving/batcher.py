"""Micro-batching: concurrent requests collected on the event loop, run together in one worker thread.

A request handler ``await``s ``MicroBatcher.submit(payload, size)``; the payload joins a bounded
queue. One collector task on the event loop repeats:

    1. wait for the first queued payload;
    2. take the payloads already queued while their sizes fit in ``max_batch``; if there is room
       left, wait ``max_wait_s`` once and take what arrived (while a batch runs the next one
       gathers in the queue, so a loaded server runs full batches without waiting);
    3. hand the batch to ``run_batch`` (one call, in the single worker thread: the backends are not
       thread-safe, and one call is one ``RolloutRunner.run`` of all the batch's episodes);
    4. resolve each payload's future with its result.

Sizes are counted in episodes (a request's ``n``); a payload is never split, so one larger than
``max_batch`` runs as a batch of its own. A payload whose caller gave up (its ``submit`` was
cancelled, e.g. by a timeout) is dropped before it runs. When ``run_batch`` raises on a batch of
several payloads, each is run again alone, so one bad request fails alone and the others still
get their results.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

P = TypeVar("P")
R = TypeVar("R")


class QueueFull(Exception):
    """The queue holds ``max_queue`` payloads already; the server answers 429."""


class BatcherClosed(Exception):
    """The batcher is shut down (the server is stopping)."""


@dataclass
class _Pending(Generic[P]):
    payload: P
    size: int
    future: asyncio.Future


@dataclass(frozen=True)
class _Failed:
    error: BaseException


class MicroBatcher(Generic[P, R]):
    """Collects payloads into batches for ``run_batch`` (see the module doc).

    Args:
        run_batch: ``payloads -> results`` (same length, same order); runs in the worker thread.
        max_batch: most payload sizes (episodes) per batch.
        max_wait_s: longest wait for more payloads after the first of a batch.
        max_queue: most payloads waiting; ``submit`` raises ``QueueFull`` beyond it.
    """

    def __init__(self, run_batch: Callable[[list[P]], Sequence[R]], *, max_batch: int, max_wait_s: float,
                 max_queue: int) -> None:
        if max_batch < 1 or max_queue < 1 or max_wait_s < 0:
            raise ValueError(f"max_batch and max_queue must be >= 1 and max_wait_s >= 0, got {max_batch}, "
                             f"{max_queue}, {max_wait_s}")
        self.run_batch = run_batch
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self.max_queue = max_queue
        self.batches = 0
        self._queue: asyncio.Queue[_Pending[P]] | None = None
        self._carry: _Pending[P] | None = None
        self._task: asyncio.Task | None = None
        self._executor: ThreadPoolExecutor | None = None

    @property
    def queued(self) -> int:
        """Payloads waiting for a batch (not counting the one running)."""
        return (self._queue.qsize() if self._queue is not None else 0) + (self._carry is not None)

    async def start(self) -> None:
        """Start the collector on the running event loop and the worker thread."""
        self._queue = asyncio.Queue(maxsize=self.max_queue)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="teamplay-serve")
        self._task = asyncio.create_task(self._collect_forever(), name="teamplay-batcher")

    async def close(self) -> None:
        """Stop collecting; queued payloads fail with ``BatcherClosed``. A batch already running
        finishes in its thread, its results dropped."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        waiting = [self._carry] if self._carry is not None else []
        while self._queue is not None and not self._queue.empty():
            waiting.append(self._queue.get_nowait())
        for pending in waiting:
            if not pending.future.done():
                pending.future.set_exception(BatcherClosed("the server is shutting down"))
        self._carry = None
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    async def submit(self, payload: P, size: int = 1) -> R:
        """Queue ``payload`` (``size`` episodes) and wait for its result; raises ``QueueFull``,
        ``BatcherClosed``, or what ``run_batch`` raised for it."""
        if self._queue is None or self._task is None:
            raise BatcherClosed("the batcher is not running")
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        try:
            self._queue.put_nowait(_Pending(payload, size, future))
        except asyncio.QueueFull:
            raise QueueFull(f"{self.max_queue} requests are waiting already") from None
        return await future

    async def _collect_forever(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = [p for p in await self._collect() if not p.future.done()]  # done: the caller gave up
            if not batch:
                continue
            self.batches += 1
            outcomes = await loop.run_in_executor(self._executor, self._run_isolated, [p.payload for p in batch])
            for pending, outcome in zip(batch, outcomes, strict=True):
                if pending.future.done():
                    continue
                if isinstance(outcome, _Failed):
                    pending.future.set_exception(outcome.error)
                else:
                    pending.future.set_result(outcome)

    async def _collect(self) -> list[_Pending[P]]:
        """One batch: the first payload and those already queued; when that is short of
        ``max_batch``, what arrives within ``max_wait_s`` too. (A timed ``queue.get`` could drop a
        payload on Python < 3.12 when its timeout and the item arrive together; a sleep cannot.)"""
        assert self._queue is not None
        first, self._carry = self._carry or await self._queue.get(), None
        batch = [first]
        if self._take_queued(batch) and self.max_wait_s > 0:
            await asyncio.sleep(self.max_wait_s)
            self._take_queued(batch)
        return batch

    def _take_queued(self, batch: list[_Pending[P]]) -> bool:
        """Move queued payloads into ``batch`` while they fit; True when more would still fit."""
        assert self._queue is not None
        size = sum(p.size for p in batch)
        while size < self.max_batch and self._carry is None and not self._queue.empty():
            pending = self._queue.get_nowait()
            if size + pending.size > self.max_batch:
                self._carry = pending  # first of the next batch: never split, never reordered
            else:
                batch.append(pending)
                size += pending.size
        return size < self.max_batch and self._carry is None

    def _run_isolated(self, payloads: list[P]) -> list[Any]:
        """``run_batch(payloads)``; when it raises, each payload alone (a failure as ``_Failed``)."""
        try:
            results = list(self.run_batch(payloads))
        except Exception as exc:  # noqa: BLE001 - re-run alone, so the failure lands on its own request
            if len(payloads) == 1:
                return [_Failed(exc)]
            return [self._run_isolated([p])[0] for p in payloads]
        if len(results) != len(payloads):
            error = RuntimeError(f"run_batch returned {len(results)} results for {len(payloads)} payloads")
            return [_Failed(error)] * len(payloads)
        return results

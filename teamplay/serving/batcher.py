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
cancelled, e.g. by a timeout or a client that disconnected) leaves the queue at once, freeing its
place; once running, its batch runs on and its result is dropped. When ``run_batch`` raises on a batch of
several payloads, each is run again alone, so one bad request fails alone and the others still
get their results; exceptions of the ``no_retry`` types (a run cancelled at shutdown) fail the
whole batch at once. ``cancel`` fails every queued and running payload (graceful shutdown).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
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
    queued_at: float = field(default_factory=time.monotonic)


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
        no_retry: exception types that fail the whole batch, never re-run payload by payload.
        on_batch: called as each batch starts with its payloads' seconds in the queue (metrics).
    """

    def __init__(self, run_batch: Callable[[list[P]], Sequence[R]], *, max_batch: int, max_wait_s: float,
                 max_queue: int, no_retry: tuple[type[Exception], ...] = (),
                 on_batch: Callable[[list[float]], None] | None = None) -> None:
        if max_batch < 1 or max_queue < 1 or max_wait_s < 0:
            raise ValueError(f"max_batch and max_queue must be >= 1 and max_wait_s >= 0, got {max_batch}, "
                             f"{max_queue}, {max_wait_s}")
        self.run_batch = run_batch
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self.max_queue = max_queue
        self.no_retry = no_retry
        self.on_batch = on_batch
        self.batches = 0
        self._waiting: deque[_Pending[P]] = deque()  # oldest first; a caller that gives up leaves at once
        self._wake: asyncio.Event | None = None
        self._running: list[_Pending[P]] = []
        self._task: asyncio.Task | None = None
        self._executor: ThreadPoolExecutor | None = None

    @property
    def queued(self) -> int:
        """Payloads waiting for a batch (not counting the ones running)."""
        return len(self._waiting)

    @property
    def running(self) -> int:
        """Payloads of the batch running now."""
        return len(self._running)

    @property
    def running_size(self) -> int:
        """Episodes (payload sizes) of the batch running now."""
        return sum(p.size for p in self._running)

    async def start(self) -> None:
        """Start the collector on the running event loop and the worker thread."""
        self._wake = asyncio.Event()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="teamplay-serve")
        self._task = asyncio.create_task(self._collect_forever(), name="teamplay-batcher")

    def cancel(self, reason: str) -> None:
        """Fail every queued and running payload with ``BatcherClosed(reason)``; the running batch's
        results, when they come, are dropped (stopping that run is the caller's: see the server)."""
        waiting, self._waiting = list(self._waiting), deque()
        for pending in waiting + self._running:
            if not pending.future.done():
                pending.future.set_exception(BatcherClosed(reason))

    async def close(self) -> None:
        """Stop collecting; queued payloads fail with ``BatcherClosed``. A batch already running
        finishes in its thread, its results dropped."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self.cancel("the server is shutting down")
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    async def submit(self, payload: P, size: int = 1) -> R:
        """``enqueue`` then ``wait``."""
        return await self.wait(self.enqueue(payload, size))

    def enqueue(self, payload: P, size: int = 1) -> _Pending[P]:
        """Queue ``payload`` (``size`` episodes) now, on the event loop's thread; raises ``QueueFull``
        or ``BatcherClosed``. Its result comes from ``wait``."""
        if self._wake is None or self._task is None:
            raise BatcherClosed("the batcher is not running")
        if len(self._waiting) >= self.max_queue:
            raise QueueFull(f"{self.max_queue} requests are waiting already")
        pending = _Pending(payload, size, asyncio.get_running_loop().create_future())
        self._waiting.append(pending)
        self._wake.set()
        return pending

    async def wait(self, pending: _Pending[P]) -> R:
        """The result of an enqueued payload, or what ``run_batch`` raised for it (``BatcherClosed``
        when cancelled). Cancelling the call (a timeout, a client that disconnected) takes a queued
        payload out of the queue at once."""
        try:
            return await pending.future
        except asyncio.CancelledError:
            with contextlib.suppress(ValueError):  # ValueError: it left the queue already (running)
                self._waiting.remove(pending)
            raise

    async def _collect_forever(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = [p for p in await self._collect() if not p.future.done()]  # done: the caller gave up
            if not batch:
                continue
            self.batches += 1
            self._running = batch
            if self.on_batch is not None:
                now = time.monotonic()
                self.on_batch([now - p.queued_at for p in batch])
            try:
                outcomes = await loop.run_in_executor(self._executor, self._run_isolated, [p.payload for p in batch])
            finally:
                self._running = []
            for pending, outcome in zip(batch, outcomes, strict=True):
                if pending.future.done():
                    continue
                if isinstance(outcome, _Failed):
                    pending.future.set_exception(outcome.error)
                else:
                    pending.future.set_result(outcome)

    async def _collect(self) -> list[_Pending[P]]:
        """One batch: the first payload and those already queued; when that is short of
        ``max_batch``, what arrives within ``max_wait_s`` too."""
        assert self._wake is not None
        while not self._waiting:
            self._wake.clear()
            await self._wake.wait()
        batch = [self._waiting.popleft()]
        if self._take_queued(batch) and self.max_wait_s > 0:
            await asyncio.sleep(self.max_wait_s)
            self._take_queued(batch)
        return batch

    def _take_queued(self, batch: list[_Pending[P]]) -> bool:
        """Move queued payloads into ``batch`` while they fit; True when more would still fit. A
        payload that does not fit stays first in the queue: never split, never reordered."""
        size = sum(p.size for p in batch)
        while self._waiting and size + self._waiting[0].size <= self.max_batch:
            pending = self._waiting.popleft()
            batch.append(pending)
            size += pending.size
        return size < self.max_batch and not self._waiting

    def _run_isolated(self, payloads: list[P]) -> list[Any]:
        """``run_batch(payloads)``; when it raises, each payload alone (a failure as ``_Failed``)."""
        try:
            results = list(self.run_batch(payloads))
        except Exception as exc:  # noqa: BLE001 - re-run alone, so the failure lands on its own request
            if len(payloads) == 1 or isinstance(exc, self.no_retry):
                return [_Failed(exc)]
            return [self._run_isolated([p])[0] for p in payloads]
        if len(results) != len(payloads):
            error = RuntimeError(f"run_batch returned {len(results)} results for {len(payloads)} payloads")
            return [_Failed(error)] * len(payloads)
        return results

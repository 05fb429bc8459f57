"""Graceful shutdown of ``teamplay serve``: drain, then stop.

On SIGTERM (what ``kill``, systemd, Docker and Kubernetes send) the server:

1. stops taking work: every new HTTP request gets 503 (code ``shutting_down``; ``/health`` answers
   503 ``{"status": "draining"}``, so a load balancer routes elsewhere) while the listening socket
   stays open, so clients get an answer rather than a refused connection;
2. lets the chat requests in flight finish, for at most ``drain_s`` seconds;
3. cancels what is left: queued requests are dropped and the running team run stops before its
   next model call; their clients get 503;
4. stops uvicorn, and the process exits 0.

``Lifecycle`` holds the state (draining, requests in flight) and runs steps 1-3; the server's
uvicorn subclass calls ``begin_drain`` from its signal handler and stops when ``on_drained`` fires.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager

_DRAINING = json.dumps({"error": {"message": "the server is shutting down; retry on another instance",
                                  "type": "server_error", "param": None, "code": "shutting_down"}}).encode()
_HEALTH_DRAINING = json.dumps({"status": "draining"}).encode()
#: how long cancelled requests get to send their 503 before uvicorn stops
_ANSWER_GRACE_S = 2.0


class Lifecycle:
    """Draining state and the chat requests in flight (see the module doc).

    Args:
        drain_s: longest wait for the requests in flight before they are cancelled.
        cancel: cancels every queued and running request (their handlers then answer 503).
    """

    def __init__(self, drain_s: float, cancel: Callable[[], Awaitable[None]]) -> None:
        self.drain_s = drain_s
        self.cancel = cancel
        self.draining = False
        self.in_flight = 0
        self.received = 0  #: chat requests taken in since start-up
        self.cancelled = 0  #: requests still in flight when the bound ran out
        self.on_drained: Callable[[], None] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task | None = None

    @contextmanager
    def request(self, new: bool = True) -> Iterator[None]:
        """Counts one chat request in flight while the block runs (``new``: and as received; a
        stream's events are the same request as its handler)."""
        self.in_flight += 1
        self.received += new
        try:
            yield
        finally:
            self.in_flight -= 1

    def begin_drain(self) -> None:
        """Start draining (thread- and signal-safe; a second call does nothing)."""
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self._start)

    def _start(self) -> None:
        if self._task is None:
            self._task = asyncio.ensure_future(self.drain())

    async def drain(self) -> None:
        """Steps 1-3 of the module doc, then ``on_drained``."""
        self.draining = True
        await self._wait_idle(self.drain_s)
        if self.in_flight:
            self.cancelled = self.in_flight
            await self.cancel()
            await self._wait_idle(_ANSWER_GRACE_S)
        if self.on_drained is not None:
            self.on_drained()

    async def _wait_idle(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while self.in_flight and time.monotonic() < deadline:
            await asyncio.sleep(0.02)


class RefuseWhileDraining:
    """ASGI middleware: 503 for every HTTP request that arrives while ``lifecycle`` drains."""

    def __init__(self, app, lifecycle: Lifecycle) -> None:
        self.app = app
        self.lifecycle = lifecycle

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or not self.lifecycle.draining:
            await self.app(scope, receive, send)
            return
        body = _HEALTH_DRAINING if scope["path"] == "/health" else _DRAINING
        await send({"type": "http.response.start", "status": 503, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
            (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})

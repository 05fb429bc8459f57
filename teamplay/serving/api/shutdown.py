"""Graceful shutdown of ``teamplay serve``: drain, then stop.

On SIGTERM (what ``kill``, systemd, Docker and Kubernetes send) the server:

1. stops taking work: every new HTTP request gets 503 (code ``shutting_down``; ``/health`` answers
   503 ``{"status": "draining"}``, so a load balancer routes elsewhere) while the listening socket
   stays open, so clients get an answer rather than a refused connection;
2. lets the chat requests in flight finish, for at most ``drain_s`` seconds;
3. cancels what is left: queued requests are dropped and the running team run stops before its
   next model call; their clients get 503;
4. stops listening without dropping a connection it took: the listening socket stops completing
   handshakes (Linux), the connections the kernel completed but the server had not accepted yet
   are accepted (closing a listening socket resets them, and their clients would see a reset on a
   connection they think established), then the listening socket closes (new connections are
   refused); every connection that has not sent its request yet gets ``REQUEST_GRACE_S`` to send
   it, and it is answered 503;
5. stops uvicorn, and the process exits 0.

While draining, every answer says ``connection: close`` and a 503 is sent only after its request's
body was read: the client then never sends on a connection the server is about to close, and no
unread byte makes the kernel reset a connection whose answer the client has not read yet.

``Lifecycle`` holds the state (draining, requests in flight) and runs steps 1-3; the server's
uvicorn subclass calls ``begin_drain`` from its signal handler, stops when ``on_drained`` fires,
and runs step 4 with ``accept_pending`` and ``await_requests``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import socket
import struct
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager

from teamplay.serving.api.asgi import HttpMiddleware, send_json

_DRAINING = json.dumps({"error": {"message": "the server is shutting down; retry on another instance",
                                  "type": "server_error", "param": None, "code": "shutting_down"}}).encode()
_HEALTH_DRAINING = json.dumps({"status": "draining"}).encode()
#: how long cancelled requests get to send their 503 before uvicorn stops
_ANSWER_GRACE_S = 2.0
#: at the stop, how long a connection taken but with no request yet gets to send one (a client
#: sends its request right after connecting: a second covers a loaded machine)
REQUEST_GRACE_S = 1.0
#: a refused request's body read (and dropped) before its 503: at most this many bytes ...
_DISCARD_BYTES = 1 << 20
#: ... and for at most this long (a client that never sends the body it announced gets its 503)
_DISCARD_S = 1.0
_CLOSE = (b"connection", b"close")
#: Linux's SO_ATTACH_FILTER (asm-generic/socket.h), and a classic BPF program of one instruction,
#: BPF_RET | BPF_K with k = 0: keep 0 bytes of the packet, i.e. drop it
_SO_ATTACH_FILTER = getattr(socket, "SO_ATTACH_FILTER", 26)
_DROP_EVERY_PACKET = struct.pack("HBBI", 0x06, 0, 0, 0)


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


class RefuseWhileDraining(HttpMiddleware):
    """ASGI middleware: 503 for every HTTP request that arrives while ``lifecycle`` drains, and
    ``connection: close`` on every answer sent while it drains (see the module doc)."""

    def __init__(self, app, lifecycle: Lifecycle) -> None:
        super().__init__(app)
        self.lifecycle = lifecycle

    async def http(self, scope, receive, send) -> None:
        if not self.lifecycle.draining:
            await self.app(scope, receive, self._closing_once_draining(send))
        else:
            await _drop_body(receive)
            await send_json(send, 503, _HEALTH_DRAINING if scope["path"] == "/health" else _DRAINING, _CLOSE)

    def _closing_once_draining(self, send):
        """``send`` adding ``connection: close`` to an answer that starts while draining: its
        client must not send another request on a connection that closes at the stop."""

        async def closing(message) -> None:
            if message["type"] == "http.response.start" and self.lifecycle.draining:
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"connection"]
                message = {**message, "headers": [*headers, _CLOSE]}
            await send(message)

        return closing


async def _drop_body(receive) -> None:
    """Reads the request's body and drops it (bounded: ``_DISCARD_BYTES``, ``_DISCARD_S``): the
    connection closes after the 503, and body bytes arriving after the close would make the
    kernel reset it, which can discard the 503 before the client reads it."""

    async def read() -> None:
        size = 0
        while size <= _DISCARD_BYTES:
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body", False):
                return
            size += len(message.get("body", b""))

    try:
        await asyncio.wait_for(read(), _DISCARD_S)
    except asyncio.TimeoutError:
        pass  # the body never came: answer anyway


def accept_pending(listeners: list[socket.socket]) -> list[socket.socket]:
    """The connections the kernel completed on ``listeners`` that nobody accepted yet, accepted
    now (without blocking): closing a listening socket resets them. First the listeners stop
    completing handshakes (``_stop_handshakes``), so that none joins a backlog after it was
    emptied; the caller closes the listeners right after (with no ``await`` between: where the
    handshakes could not be stopped, this keeps that window to microseconds)."""
    accepted = []
    for listener in listeners:
        if listener.fileno() == -1:  # closed already
            continue
        _stop_handshakes(listener)
        listener.setblocking(False)
        while True:
            try:
                accepted.append(listener.accept()[0])
            except ConnectionAbortedError:  # its client reset it while it waited: the next one
                continue
            except OSError:  # none left (EAGAIN), or none can be taken (out of descriptors)
                break
    return accepted


def _stop_handshakes(listener: socket.socket) -> None:
    """On Linux, a socket filter that drops every packet reaching ``listener``: the connections in
    its backlog are unaffected (each is a socket of its own already), a new client's SYN is
    dropped, and its retry (a second later) is refused once the listener is closed. Elsewhere, or
    if the kernel refuses the filter, nothing."""
    if not sys.platform.startswith("linux"):
        return
    program = ctypes.create_string_buffer(_DROP_EVERY_PACKET)  # the kernel copies it at once
    fprog = struct.pack("HP", 1, ctypes.addressof(program))  # struct sock_fprog {len; filter *}
    with contextlib.suppress(OSError):
        listener.setsockopt(socket.SOL_SOCKET, _SO_ATTACH_FILTER, fprog)


async def await_requests(connections: set, grace_s: float = REQUEST_GRACE_S) -> None:
    """Returns once every connection in ``connections`` (uvicorn's, live) has sent a request, or
    after ``grace_s``: a connection closed before its request is read drops that request with no
    answer. (A connection whose last request was answered is idle and may close.)"""
    deadline = time.monotonic() + grace_s
    await asyncio.sleep(0.02)  # connections just accepted register on the loop's next turns
    while any(_no_request_yet(c) for c in connections) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)


def _no_request_yet(connection) -> bool:
    """Whether uvicorn's HTTP ``connection`` was taken but no request of it was read yet (its
    ``cycle``, the current request, is set once a request's headers are read)."""
    return getattr(connection, "cycle", False) is None

"""``teamplay serve``: an OpenAI-compatible HTTP server in front of a team (FastAPI + uvicorn).

Routes:

* ``POST /v1/chat/completions``: one request = ``n`` team episodes on the last user message (see
  ``teamplay.serving.episodes.engine`` for how the question becomes a problem, and its seeds). Each choice's
  content is the team's final answer; ``usage`` sums the team's tokens; the extra top-level field
  ``teamplay`` holds every episode's transcript and per-role usage (``teamplay.serving.api.render``).
* ``GET /v1/models`` (and ``/v1/models/{id}``): the one served model, whose id is the team's name.
* ``GET /health``: ``{"status": "ok", ...}`` with the queue length, the runs so far, the chat
  requests received and in flight (being read, queued, running or streaming).
* ``GET /metrics``: Prometheus text format (``teamplay.serving.api.metrics``).

Throughput: continuous batching (``teamplay.serving.episodes.scheduler``): one worker thread steps every
running episode in lock step, one batched ``generate`` per turn, and a new request joins at the
next turn (up to ``max_batch`` episodes at once); a request is answered when its own episodes end.

Errors use OpenAI's shape, ``{"error": {"message", "type", "param", "code"}}``:

=======  ==================================================================================
status   when
=======  ==================================================================================
400      body not JSON or not an object; a field missing or out of range (``temperature``
         outside 0-2, ``n < 1``, ...); ``stream_options`` without ``stream``; no user message; a non-text content
         part; more than 4 ``stop`` strings; ``n`` above ``max_n``; the question longer than
         ``max_question_chars`` or more than ``max_messages`` messages
         (code ``context_length_exceeded``)
401      a key is set (``--api-key``) and the request's ``Authorization: Bearer`` is not it
         (code ``invalid_api_key``; ``/health`` needs no key)
404      a ``model`` other than the served one (code ``model_not_found``); an unknown route
413      a body larger than ``max_body_bytes``
429      ``max_queue`` requests waiting already (code ``queue_full``)
500      the team's model call raised for this request (retried request by request: the others go on)
499      (not sent: the client disconnected; counted in the metrics) its queued request is dropped
503      the server is shutting down (SIGTERM: see ``teamplay.serving.api.shutdown``)
504      no result within ``timeout_s`` (the request is dropped, queued or running)
=======  ==================================================================================
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from teamplay.config import MAX_TEMPERATURE, MIN_TEMPERATURE
from teamplay.serving.api.auth import BearerAuth
from teamplay.serving.api.metrics import CountRequests, ServeMetrics
from teamplay.serving.api.render import render_completion
from teamplay.serving.api.schema import ApiError, ChatCompletion, ChatCompletionRequest, ModelCard, ModelList
from teamplay.serving.api.shutdown import Lifecycle, RefuseWhileDraining, accept_pending, await_requests
from teamplay.serving.api.streaming import stream_completion
from teamplay.serving.episodes.engine import EpisodeRequest, TeamEngine
from teamplay.serving.episodes.scheduler import BatcherClosed, ContinuousBatcher, QueueFull

#: OpenAI's bound on stop sequences
MAX_STOP = 4


@dataclass(frozen=True)
class ServeLimits:
    """What one server accepts and how it batches.

    Fields:
        max_batch: most episodes running at once (a request's ``n`` counts ``n``; it is never
            split: one larger than this runs when nothing else does).
        max_wait_s: when no episode runs, a first request waits for others to share its first
            turn until this long passes without a new one (at most 10 such waits; never a wait while
            episodes run).
        max_queue: most requests waiting for the worker; more get 429.
        timeout_s: longest a request waits for its result (queue and run); then 504.
        max_n: most episodes per request.
        max_body_bytes: largest request body; larger gets 413.
        max_question_chars: longest question (the last user message), in characters.
        max_messages: most messages per request.
        drain_s: at SIGTERM, longest wait for the requests in flight before they are cancelled
            (``teamplay.serving.api.shutdown``).
    """

    max_batch: int = 64
    max_wait_s: float = 0.02
    max_queue: int = 1024
    timeout_s: float = 120.0
    max_n: int = 16
    max_body_bytes: int = 1 << 20
    max_question_chars: int = 16_000
    max_messages: int = 256
    drain_s: float = 30.0

    def __post_init__(self) -> None:
        for name in ("max_batch", "max_queue", "max_n", "max_body_bytes", "max_question_chars", "max_messages"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.timeout_s <= 0 or self.drain_s < 0 or self.max_wait_s < 0:
            raise ValueError(f"timeout_s must be > 0, drain_s and max_wait_s >= 0, got {self.timeout_s}, "
                             f"{self.drain_s}, {self.max_wait_s}")


def create_app(engine: TeamEngine, model_name: str, limits: ServeLimits | None = None,
               api_key: str | None = None) -> FastAPI:
    """The FastAPI app serving ``engine``'s team as model ``model_name`` (see the module doc);
    with ``api_key``, every route but ``/health`` wants ``Authorization: Bearer KEY``
    (``teamplay.serving.api.auth``)."""
    limits = limits or ServeLimits()
    metrics = ServeMetrics()
    batcher = ContinuousBatcher(engine, max_batch=limits.max_batch, max_queue=limits.max_queue,
                                max_wait_s=limits.max_wait_s,
                                on_admit=metrics.observe_waits, on_turn=metrics.observe_turn,
                                on_done=metrics.observe_done)
    metrics.watch(queued=lambda: batcher.queued, in_flight=lambda: batcher.running_size)
    started = int(time.time())

    async def cancel_all() -> None:
        engine.cancel()  # the running run stops before its next model call
        batcher.cancel_all("the server is shutting down: the request was cancelled")

    lifecycle = Lifecycle(limits.drain_s, cancel_all)

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        lifecycle.loop = asyncio.get_running_loop()
        await batcher.start()
        try:
            yield
        finally:
            await batcher.close()

    app = FastAPI(title="teamplay", summary=f"team {model_name} behind OpenAI's chat-completions API",
                  lifespan=lifespan)
    app.state.engine, app.state.batcher, app.state.limits = engine, batcher, limits
    app.state.lifecycle, app.state.metrics = lifecycle, metrics
    _add_error_handlers(app)
    app.add_middleware(RefuseWhileDraining, lifecycle=lifecycle)
    if api_key is not None:  # a request without the key learns nothing, not even draining
        app.add_middleware(BearerAuth, key=api_key)
    app.add_middleware(CountRequests, metrics=metrics)  # outermost: every answer counted, 401s too

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type=metrics.content_type)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        stats = batcher.stats
        return {"status": "ok", "model": model_name, "queued": batcher.queued, "running": batcher.running,
                "turns": stats.turns, "requests": stats.requests, "episodes": stats.episodes,
                "received": lifecycle.received, "in_flight": lifecycle.in_flight}

    @app.get("/v1/models")
    async def models() -> ModelList:
        return ModelList(data=[ModelCard(id=model_name, created=started)])

    @app.get("/v1/models/{model_id}")
    async def model(model_id: str) -> ModelCard:
        _check_model(model_id, model_name)
        return ModelCard(id=model_name, created=started)

    # the body is read by hand (not a FastAPI body parameter): its size is bounded while it is
    # read, and every parse or validation failure gets OpenAI's 400 rather than FastAPI's 422
    @app.post("/v1/chat/completions", response_model=None)
    async def chat_completions(request: Request) -> ChatCompletion | StreamingResponse:
        with lifecycle.request():
            body = _parse_request(await _read_json(request, limits.max_body_bytes))
            _check_model(body.model, model_name)
            item, known = engine.item_for(_question(body, limits))
            request_id, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
            work = EpisodeRequest(request_id=request_id, item=item, n=body.n, seed=body.seed,
                                  sampling=engine.sampling_for(_max_tokens(body), body.temperature, body.top_p))

            pending = _enqueue(batcher, work)

            async def answer() -> ChatCompletion:
                episodes = await _result(batcher, pending, limits.timeout_s)
                return render_completion(request_id=request_id, model=model_name, created=created, item=item,
                                         reference_known=known, episodes=episodes, task=engine.task.name,
                                         protocol=engine.protocol, stop=body.stop_strings())

            if not body.stream:
                return await _until_disconnected(request, answer())
        # the stream counts as in flight until its last event; Starlette cancels it when the client
        # disconnects, which takes a queued request out of the queue
        include_usage = body.stream_options is not None and body.stream_options.include_usage
        events = stream_completion(answer(), request_id=request_id, model=model_name, created=created, n=body.n,
                                   include_usage=include_usage)
        return StreamingResponse(_counted(lifecycle, events), media_type="text/event-stream",
                                 headers={"cache-control": "no-cache", "x-accel-buffering": "no"})

    return app


# ------------------------------------------------------------------------------------ the request


async def _read_json(request: Request, max_bytes: int) -> Any:
    """The body parsed as JSON; 413 past ``max_bytes`` (read no further), 400 when not JSON."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise _too_large(max_bytes)
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > max_bytes:
                raise _too_large(max_bytes)
            chunks.append(chunk)
    except ClientDisconnect:  # hung up half-way through its body: nothing to answer, nothing to log
        raise ApiError(499, "the client closed the connection", code="client_closed_request") from None
    try:
        return json.loads(b"".join(chunks))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"We could not parse the JSON body of your request: {exc}", code="invalid_json") from None


def _too_large(max_bytes: int) -> ApiError:
    return ApiError(413, f"request body larger than {max_bytes} bytes", code="request_too_large")


def _parse_request(data: Any) -> ChatCompletionRequest:
    """The request model; a 400 naming the first bad field, and for ``stream: true``."""
    if not isinstance(data, dict):
        raise ApiError(400, f"the request body must be a JSON object, got {type(data).__name__}")
    try:
        body = ChatCompletionRequest.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        param = ".".join(str(part) for part in error["loc"]) or None
        got = f" (got {error['input']!r})" if error["type"] != "missing" else ""
        raise ApiError(400, f"{param}: {error['msg']}{got}", param=param,
                       code="missing_required_parameter" if error["type"] == "missing" else "invalid_value") from None
    if body.stream_options is not None and not body.stream:
        raise ApiError(400, "stream_options: only allowed with stream=true", param="stream_options",
                       code="invalid_value")
    if body.temperature is not None and 0 < body.temperature < MIN_TEMPERATURE:
        raise ApiError(400, f"temperature: use 0 (greedy) or a value in [{MIN_TEMPERATURE}, {MAX_TEMPERATURE}] "
                            f"(got {body.temperature})", param="temperature", code="invalid_value")
    if len(body.stop_strings()) > MAX_STOP:
        raise ApiError(400, f"stop: at most {MAX_STOP} strings", param="stop", code="invalid_value")
    return body


def _check_model(model: str, served: str) -> None:
    if model != served:
        raise ApiError(404, f"The model {model!r} does not exist: this server serves {served!r} "
                            f"(GET /v1/models)", param="model", code="model_not_found")


def _question(body: ChatCompletionRequest, limits: ServeLimits) -> str:
    """The text of the last user message (the team's problem); the request's size limits."""
    if body.n > limits.max_n:
        raise ApiError(400, f"n: at most {limits.max_n} episodes per request (got {body.n})", param="n",
                       code="invalid_value")
    if len(body.messages) > limits.max_messages:
        raise ApiError(400, f"messages: at most {limits.max_messages} messages (got {len(body.messages)})",
                       param="messages", code="context_length_exceeded")
    users = [i for i, m in enumerate(body.messages) if m.role == "user"]
    if not users:
        raise ApiError(400, "messages: no user message; the team answers the last user message",
                       param="messages", code="invalid_value")
    text = _text(body.messages[users[-1]].content, f"messages.{users[-1]}.content")
    if not text.strip():
        raise ApiError(400, "messages: the last user message is empty", param=f"messages.{users[-1]}.content",
                       code="invalid_value")
    if len(text) > limits.max_question_chars:
        raise ApiError(400, f"messages: the question has {len(text)} characters; this server takes at most "
                            f"{limits.max_question_chars}", param="messages", code="context_length_exceeded")
    return text


def _text(content, param: str) -> str:
    """A message content as text: a string, or the text parts joined by newlines."""
    if content is None or isinstance(content, str):
        return content or ""
    for part in content:
        if part.type != "text" or part.text is None:
            raise ApiError(400, f"{param}: only text parts are supported (got a {part.type!r} part)",
                           param=param, code="invalid_value")
    return "\n".join(part.text for part in content)


def _max_tokens(body: ChatCompletionRequest) -> int | None:
    given = [v for v in (body.max_tokens, body.max_completion_tokens) if v is not None]
    return min(given) if given else None


def _enqueue(batcher: ContinuousBatcher, work: EpisodeRequest):
    """``work`` queued now (so a full queue is a 429 before a stream's 200 goes out)."""
    try:
        return batcher.enqueue(work)
    except QueueFull as exc:
        raise ApiError(429, f"the server is at capacity ({exc}); retry later", type="rate_limit_error",
                       code="queue_full") from None
    except BatcherClosed as exc:
        raise ApiError(503, str(exc), type="server_error", code="shutting_down") from None


async def _result(batcher: ContinuousBatcher, pending, timeout_s: float):
    try:
        return await asyncio.wait_for(batcher.wait(pending), timeout_s)
    except TimeoutError:
        raise ApiError(504, f"no result within {timeout_s:g} s", type="timeout_error", code="timeout") from None
    except BatcherClosed as exc:
        raise ApiError(503, str(exc), type="server_error", code="shutting_down") from None
    except Exception as exc:  # noqa: BLE001 - the team's run raised: a 500 for this request alone
        raise ApiError(500, f"the team's run failed: {type(exc).__name__}: {exc}", type="server_error") from None


async def _counted(lifecycle: Lifecycle, events: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    with lifecycle.request(new=False):
        async for data in events:
            yield data


async def _until_disconnected(request: Request, work):
    """``await work``, unless the client disconnects first: then ``work`` is cancelled (a queued
    request is dropped before it runs) and a 499 (nginx's "client closed request") is raised, which
    nobody reads but the metrics."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    if not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        raise ApiError(499, "the client closed the connection", code="client_closed_request")
    return task.result()


async def _disconnected(request: Request) -> None:
    """Returns when the client disconnects (the body is read already: the next ASGI message is
    the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _add_error_handlers(app: FastAPI) -> None:
    """Every error in OpenAI's shape: ours, the router's (404, 405), and any bug (500)."""

    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(exc.content(), status_code=exc.status)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = f"{request.method} {request.url.path}: {exc.detail}"
        return JSONResponse(ApiError(exc.status_code, message).content(), status_code=exc.status_code)

    @app.exception_handler(Exception)
    async def server_error(_: Request, exc: Exception) -> JSONResponse:
        error = ApiError(500, f"internal error: {type(exc).__name__}: {exc}", type="server_error")
        return JSONResponse(error.content(), status_code=500)


# ------------------------------------------------------------------------------------ running it


def bind(host: str, port: int) -> socket.socket:
    """A socket bound to (host, port) (``port=0``: a free one), so that a port in use is an
    ``OSError`` here, before uvicorn starts, rather than uvicorn's exit."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def url_of(sock: socket.socket) -> str:
    """``http://HOST:PORT`` of a bound socket (an IPv6 host in brackets)."""
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class _Server(uvicorn.Server):
    """uvicorn's server, calling ``on_ready`` once it listens; SIGTERM drains the app first
    (``teamplay.serving.api.shutdown``) and ends the process normally (exit 0) rather than by the
    signal. Ctrl-C (SIGINT) stops as uvicorn does; a second SIGTERM stops at once."""

    def __init__(self, config: uvicorn.Config, on_ready: Callable[[], None], lifecycle: Lifecycle) -> None:
        super().__init__(config)
        self.on_ready = on_ready
        self.lifecycle = lifecycle
        lifecycle.on_drained = self._exit

    def _exit(self) -> None:
        self.should_exit = True

    async def startup(self, sockets=None) -> None:
        await super().startup(sockets)
        if not self.should_exit:
            self.on_ready()

    def handle_exit(self, sig: int, frame) -> None:
        if sig != signal.SIGTERM:
            super().handle_exit(sig, frame)
        elif self.lifecycle.draining:
            self.should_exit = True
        else:  # not recorded as captured: uvicorn would raise it again after shutting down
            self.lifecycle.begin_drain()

    async def shutdown(self, sockets=None) -> None:
        """Stops listening without dropping a connection taken (step 4 of
        ``teamplay.serving.api.shutdown``), then uvicorn's shutdown. uvicorn's alone closes the
        listening sockets, which resets the connections still in their backlog, and then every
        connection whose request it has not read yet: both clients get no answer."""
        self.lifecycle.draining = True  # also at Ctrl-C, where no drain ran: what arrives now gets 503
        taken = accept_pending(list(sockets or []))  # teamplay always hands uvicorn its sockets
        for server in self.servers:  # right after, no await between: new connections are refused
            server.close()
        loop = asyncio.get_running_loop()
        for connection in taken:
            with contextlib.suppress(OSError):  # its client hung up already: nobody to answer
                await loop.connect_accepted_socket(self._new_protocol, connection, ssl=self.config.ssl)
        await await_requests(self.server_state.connections)
        await super().shutdown(sockets)

    def _new_protocol(self) -> asyncio.Protocol:
        """uvicorn's HTTP protocol for one connection, as its ``startup`` makes it."""
        return self.config.http_protocol_class(config=self.config, server_state=self.server_state,
                                               app_state=self.lifespan.state)


def _uvicorn_server(app: FastAPI, on_ready: Callable[[], None]) -> _Server:
    # access logs off: one line per request would flood a terminal under load; no websockets route
    config = uvicorn.Config(app, log_level="warning", access_log=False, ws="none", timeout_graceful_shutdown=5)
    return _Server(config, on_ready, app.state.lifecycle)


def serve(app: FastAPI, host: str = "127.0.0.1", port: int = 8000,
          on_ready: Callable[[str], None] | None = None) -> None:
    """Serve ``app`` until interrupted (Ctrl-C); ``on_ready(url)`` once it listens."""
    sock = bind(host, port)
    url = url_of(sock)
    _uvicorn_server(app, lambda: on_ready(url) if on_ready else None).run(sockets=[sock])


@contextmanager
def running(app: FastAPI, host: str = "127.0.0.1", port: int = 0, start_timeout_s: float = 30.0) -> Iterator[str]:
    """``app`` served in a background thread (tests, benchmarks); yields its URL, stops on exit."""
    sock = bind(host, port)
    ready = threading.Event()
    server = _uvicorn_server(app, ready.set)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="teamplay-serve-http", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + start_timeout_s
        while not ready.wait(0.05):
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start (within {start_timeout_s:g} s)")
        yield url_of(sock)
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()

"""``GET /metrics`` of ``teamplay serve``: Prometheus text format, written by ``prometheus_client``.

Every series lives in the app's own ``CollectorRegistry`` (two apps in one process, as in the
tests, never share counters). What is exported:

==========================================  =========  ==================================================
name                                        type       what
==========================================  =========  ==================================================
``teamplay_requests_total{route,status}``   counter    HTTP requests answered, by route and status (401s,
                                                       503s while draining and 499 disconnects included)
``teamplay_request_latency_seconds``        histogram  chat-completion requests: post to answer
``teamplay_queue_wait_seconds``             histogram  a chat request's wait from queued to its run's start
``teamplay_episodes_per_turn``              histogram  episodes stepped in each lock-step turn (the batch
                                                       size; with continuous batching the turn is what a
                                                       run used to be)
``teamplay_generated_tokens_total``         counter    completion tokens of the requests answered
``teamplay_episodes_total``                 counter    episodes of the requests answered
``teamplay_in_flight_episodes``             gauge      episodes of the run going on now
``teamplay_queued_requests``                gauge      chat requests waiting for a run
==========================================  =========  ==================================================

``route`` is one of the served paths or ``other`` (an unknown path is not a label value: a client
could otherwise make the series grow without bound).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from teamplay.records import Episode
from teamplay.serving.api.asgi import HttpMiddleware

#: the route label values; any other path counts as "other"
ROUTES = frozenset({"/v1/chat/completions", "/v1/models", "/health", "/metrics"})
#: seconds: a scripted team answers in milliseconds, a CPU model in tens of seconds
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250)
#: episodes per run: powers of two up to a large --max-batch
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class ServeMetrics:
    """The server's series (see the module doc); ``watch`` gives the gauges their sources."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("teamplay_requests", "HTTP requests answered, by route and status",
                                ["route", "status"], registry=r)
        self.latency = Histogram("teamplay_request_latency_seconds", "Chat-completion requests, post to answer",
                                 buckets=LATENCY_BUCKETS, registry=r)
        self.queue_wait = Histogram("teamplay_queue_wait_seconds", "Chat requests' wait from queued to their "
                                    "run's start", buckets=LATENCY_BUCKETS, registry=r)
        self.episodes_per_turn = Histogram("teamplay_episodes_per_turn", "Episodes stepped in each lock-step turn",
                                           buckets=BATCH_BUCKETS, registry=r)
        self.generated_tokens = Counter("teamplay_generated_tokens", "Completion tokens the team generated",
                                        registry=r)
        self.episodes = Counter("teamplay_episodes", "Episodes of the requests answered", registry=r)
        self._in_flight = Gauge("teamplay_in_flight_episodes", "Episodes running now", registry=r)
        self._queued = Gauge("teamplay_queued_requests", "Chat requests waiting to join the batch", registry=r)

    def watch(self, queued: Callable[[], int], in_flight: Callable[[], int]) -> None:
        """The gauges read ``queued()`` (chat requests waiting) and ``in_flight()`` (episodes
        running) at each scrape."""
        self._queued.set_function(queued)
        self._in_flight.set_function(in_flight)

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def observe_turn(self, episodes: int) -> None:
        """One lock-step turn stepped ``episodes`` episodes (the worker thread: the client is thread-safe)."""
        self.episodes_per_turn.observe(episodes)

    def observe_done(self, episodes: Sequence[Episode]) -> None:
        """A request was answered with ``episodes``."""
        self.episodes.inc(len(episodes))
        self.generated_tokens.inc(sum(ep.tokens for ep in episodes))

    def observe_waits(self, waits: Sequence[float]) -> None:
        for wait in waits:
            self.queue_wait.observe(wait)


class CountRequests(HttpMiddleware):
    """ASGI middleware: every HTTP response counted by route and status; chat latency observed."""

    def __init__(self, app, metrics: ServeMetrics) -> None:
        super().__init__(app)
        self.metrics = metrics

    async def http(self, scope, receive, send) -> None:
        route = scope["path"] if scope["path"] in ROUTES else "other"
        start, status = time.perf_counter(), []

        async def counting_send(message) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, counting_send)
        finally:
            code = str(status[0]) if status else "499"  # no response started: the client went away
            self.metrics.requests.labels(route=route, status=code).inc()
            if route == "/v1/chat/completions":
                self.metrics.latency.observe(time.perf_counter() - start)

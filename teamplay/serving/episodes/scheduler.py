"""Continuous batching: requests join the lock-step turns of the episodes already running.

``RolloutRunner`` steps a fixed set of episodes in lock step until every one has ended. A server
that ran one ``RolloutRunner.run`` per batch of requests would make a request that arrives during
a run wait for the whole run. The scheduler drives the same pieces (``TeamEnv.reset``/``step``/
``episode``, one batched ``backend.generate`` per turn) but keeps the set of episodes open: its
worker thread repeats

    1. admit queued requests, oldest first, while their episodes fit in ``max_batch`` (a request
       is never split; one larger than ``max_batch`` is admitted when nothing else runs), and reset
       one env per episode; when nothing was running, first wait for more while they keep coming
       (until ``max_wait_s`` passes without one, at most ``GATHER_ROUNDS`` waits): clients that
       post together start together, not one turn apart;
    2. drop the requests whose client gave up (a disconnect, a timeout): their slots are free now;
    3. answer each request whose episodes have all ended;
    4. take one turn: the turn request of every running episode, one ``generate`` call per
       decoding setting (chunks of ``generate_batch``), each env stepped with its generation.

So a request waits at most one turn to join, and leaves as soon as its own episodes end.

Seeds (``teamplay.serving.episodes.engine``'s rules, kept): an unseeded request's episodes take the next
env seeds from the config's ``seed``, in admission order; a seeded one gets ``seed, seed + 1, ...``.
Greedy requests of one decoding setting share each ``generate`` call whatever their seeds (no
random stream is drawn). Sampled unseeded requests share theirs, seeded by the scheduler's turn
count. A seeded sampled request shares them too when the backend draws each row from a stream of
its own (``GenerationBackend.row_seeds``: ``hf``, ``vllm``): each of its episodes' turns carries
``TurnRequest.row_seed``, derived from the request's seed, the episode's index and the episode's
turn count (a seed per episode, as a training group gets one per episode), so it gets the same
episodes whatever runs beside it (tested) and whenever it arrives. On a backend without row
streams (scripted policies key their randomness on a row's place in the call) it has its own
``generate`` call instead, its stream seeded from its seed and its own call count as
``RolloutRunner.run`` seeds a run.

A failing ``generate`` call is retried request by request (envs are stepped only after a call
succeeds, so the turn is the same); a request that fails alone gets the error, the others go on.
``cancel_all`` (shutdown) fails every queued and running request, and the worker stops before
its next model call.

Thread-safety: the event loop (``enqueue``, ``wait``, ``cancel_all``) and the worker meet only
under ``self._lock``; futures are resolved on the loop (``call_soon_threadsafe``). The worker is
the only thread that touches envs and the backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from teamplay.envs.team_env import TeamEnv
from teamplay.records import Episode, TurnRequest, derived_seed
from teamplay.serving.episodes.engine import EpisodeRequest, RunCancelled, TeamEngine

# RolloutRunner's turn seeds, so a seeded request served here gets the episodes a run of it alone gets
from teamplay.training.play.rollout import SEED_STRIDE

#: most waits of max_wait_s for company when a first request finds the server idle
GATHER_ROUNDS = 10


class QueueFull(Exception):
    """``max_queue`` requests are waiting already; the server answers 429."""


class BatcherClosed(Exception):
    """The scheduler is shut down or the request was cancelled (the server is stopping)."""


@dataclass(eq=False)
class Pending:
    """A request from ``enqueue`` to its answer.

    Fields:
        work: the request.
        future: resolved on the event loop with its ``n`` episodes, or an exception.
        queued_at: ``time.monotonic()`` of ``enqueue``.
        gone: set on the loop when the caller gave up; the worker drops it at the next turn.
    """

    work: EpisodeRequest
    future: asyncio.Future
    queued_at: float = field(default_factory=time.monotonic)
    gone: bool = False


@dataclass(eq=False)
class _Running:
    """An admitted request: one env per episode, the episodes that ended, its call counts."""

    pending: Pending
    envs: list[TeamEnv]
    episodes: list[Episode | None]
    own_stream: bool  #: a seeded sampled request on a backend without row streams: its own generate call
    row_streams: bool = False  #: a seeded sampled request whose turns carry their own ``row_seed``
    calls: int = 0  #: its own generate calls (``own_stream``)
    turns: list[int] = field(default_factory=list)  #: model turns taken, per episode (``row_streams``)


@dataclass(frozen=True)
class SchedulerStats:
    """Since start-up: ``turns`` (lock-step turns with at least one model call), ``generate_calls``,
    ``requests`` answered and their ``episodes``."""

    turns: int = 0
    generate_calls: int = 0
    requests: int = 0
    episodes: int = 0


class ContinuousBatcher:
    """Runs ``engine``'s requests with continuous batching (see the module doc).

    Args:
        engine: the team (envs, backend, decoding, seeds).
        max_batch: most episodes running at once.
        max_queue: most requests waiting; ``enqueue`` raises ``QueueFull`` beyond it.
        max_wait_s: when nothing runs, the quiet gap that ends the first request's wait for others
            before its first turn (clients that post together then start together rather than one
            turn apart); never a wait while episodes run.
        on_admit: called with the admitted requests' seconds in the queue (metrics; worker thread).
        on_turn: called with the episodes of each turn that made model calls (metrics; worker thread).
        on_done: called with a request's episodes when it is answered (metrics; worker thread).
    """

    def __init__(self, engine: TeamEngine, *, max_batch: int, max_queue: int, max_wait_s: float = 0.0,
                 on_admit: Callable[[list[float]], None] | None = None,
                 on_turn: Callable[[int], None] | None = None,
                 on_done: Callable[[list[Episode]], None] | None = None) -> None:
        if max_batch < 1 or max_queue < 1:
            raise ValueError(f"max_batch and max_queue must be >= 1, got {max_batch}, {max_queue}")
        self.engine = engine
        self.max_batch = max_batch
        self.max_queue = max_queue
        self.max_wait_s = max_wait_s
        self.on_admit, self.on_turn, self.on_done = on_admit, on_turn, on_done
        self.stats = SchedulerStats()
        self._lock = threading.Condition()
        self._waiting: deque[Pending] = deque()
        self._running: list[_Running] = []
        self._closed = True
        self._turn = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ the event loop's side

    @property
    def queued(self) -> int:
        """Requests waiting to be admitted."""
        return len(self._waiting)

    @property
    def running(self) -> int:
        """Requests admitted and not answered yet."""
        return len(self._running)

    @property
    def running_size(self) -> int:
        """Episodes running now (admitted, not ended)."""
        return sum(r.episodes.count(None) for r in list(self._running))

    async def start(self) -> None:
        """Start the worker thread; requests resolve on the running event loop."""
        self._loop = asyncio.get_running_loop()
        self._closed = False
        self._thread = threading.Thread(target=self._work, name="teamplay-serve", daemon=False)
        self._thread.start()

    def enqueue(self, work: EpisodeRequest) -> Pending:
        """Queue ``work`` now; raises ``QueueFull`` or ``BatcherClosed``. Its answer comes from ``wait``."""
        with self._lock:
            if self._closed:
                raise BatcherClosed("the server is shutting down")
            if len(self._waiting) >= self.max_queue:
                raise QueueFull(f"{self.max_queue} requests are waiting already")
            pending = Pending(work, asyncio.get_running_loop().create_future())
            self._waiting.append(pending)
            self._lock.notify()
        return pending

    async def wait(self, pending: Pending) -> list[Episode]:
        """The request's ``n`` episodes. Cancelling the call (a timeout, a client that disconnected)
        takes a queued request out of the queue at once and a running one out at the next turn."""
        try:
            return await pending.future
        except asyncio.CancelledError:
            with self._lock:
                pending.gone = True
                with contextlib.suppress(ValueError):  # ValueError: admitted already
                    self._waiting.remove(pending)
            raise

    def cancel_all(self, reason: str) -> None:
        """Fail every queued and running request with ``BatcherClosed(reason)`` (on the loop)."""
        with self._lock:
            doomed = list(self._waiting) + [r.pending for r in self._running]
            self._waiting.clear()
            for pending in doomed:
                pending.gone = True
        for pending in doomed:
            if not pending.future.done():
                pending.future.set_exception(BatcherClosed(reason))

    async def close(self) -> None:
        """Stop: the worker ends after the turn it is in (not waited for here); everything queued or
        running fails with ``BatcherClosed``."""
        with self._lock:
            self._closed = True
            self._lock.notify()
        self.cancel_all("the server is shutting down")

    def join(self, timeout_s: float) -> bool:
        """Wait (blocking) for the worker to end after ``close``; whether it did within ``timeout_s``
        (it ends after the model call it is in)."""
        if self._thread is not None:
            self._thread.join(timeout_s)
            return not self._thread.is_alive()
        return True

    # ------------------------------------------------------------------ the worker thread

    def _work(self) -> None:
        while True:
            with self._lock:
                while not self._closed and not self._waiting and not self._running:
                    self._lock.wait()
                if self._closed:
                    return
                idle = not self._running
                admitted = self._admit()
            # company for the first turn: wait while requests keep coming (a burst of clients
            # posting together), until a quiet max_wait_s or GATHER_ROUNDS waits
            for _ in range(GATHER_ROUNDS if idle and admitted and self.max_wait_s > 0 else 0):
                time.sleep(self.max_wait_s)
                with self._lock:
                    more = self._admit(admitted)
                admitted += more
                if not more:
                    break
            with self._lock:
                self._running = [r for r in self._running if not r.pending.gone]
            try:
                self._start(admitted)
                self._answer_finished()
                if self._running:
                    self._step()
            except Exception as exc:  # noqa: BLE001 - RunCancelled (shutdown), or an env broke: the
                # requests running fail with it and the worker lives on for the next ones
                self._fail([r.pending for r in self._running], exc)
                with self._lock:
                    self._running = []

    def _admit(self, admitted_before: Sequence[Pending] = ()) -> list[Pending]:
        """Under the lock: the queued requests that fit now beside the running ones and
        ``admitted_before``, oldest first, never reordered."""
        free = self.max_batch - sum(r.episodes.count(None) for r in self._running)
        free -= sum(p.work.n for p in admitted_before)
        admitted: list[Pending] = []
        while self._waiting:
            head = self._waiting[0]
            if head.work.n > free and (self._running or admitted or admitted_before):
                break
            admitted.append(self._waiting.popleft())
            free -= head.work.n
        return admitted

    def _start(self, admitted: Sequence[Pending]) -> None:
        """An env per episode of each admitted request, reset with the request's env seeds."""
        if not admitted:
            return
        now = time.monotonic()
        if self.on_admit is not None:
            self.on_admit([now - p.queued_at for p in admitted])
        for pending in admitted:
            work = pending.work
            try:
                envs = [self._env(work, seed) for seed in self.engine.env_seeds(work)]
            except Exception as exc:  # noqa: BLE001 - this request's problem fails this request alone
                self._fail([pending], exc)
                continue
            seeded = work.seed is not None and not work.sampling.greedy
            rows = seeded and self.engine.backend.row_seeds
            running = _Running(pending, envs, [None] * work.n, own_stream=seeded and not rows,
                               row_streams=rows, turns=[0] * work.n)
            with self._lock:
                if pending.gone:  # gave up while its envs were built
                    continue
                self._running.append(running)

    def _env(self, work: EpisodeRequest, seed: int) -> TeamEnv:
        env = self.engine.make_env()
        env.reset(seed=seed, options={"item": work.item, "group_id": work.request_id})
        return env

    def _answer_finished(self) -> None:
        """Record each episode that ended; answer the requests whose episodes all ended."""
        done = []
        for running in self._running:
            for j, env in enumerate(running.envs):
                if running.episodes[j] is None and env.next_turn() is None:
                    running.episodes[j] = env.episode()
            if None not in running.episodes:
                done.append(running)
        if not done:
            return
        with self._lock:
            self._running = [r for r in self._running if r not in done]
        for running in done:
            episodes = list(running.episodes)
            s = self.stats
            self.stats = SchedulerStats(s.turns, s.generate_calls, s.requests + 1, s.episodes + len(episodes))
            if self.on_done is not None:
                self.on_done(episodes)
            self._resolve(running.pending, episodes)

    def _step(self) -> None:
        """One lock-step turn of every running episode (see the module doc for the calls)."""
        groups: dict[object, list[tuple[_Running, int, TurnRequest]]] = {}
        for running in self._running:
            key = ("own", id(running)) if running.own_stream else ("shared", running.pending.work.sampling)
            for j, env in enumerate(running.envs):
                if running.episodes[j] is None:
                    request = env.next_turn()
                    if running.row_streams:
                        seed = row_seed(running.pending.work.seed, j, running.turns[j])
                        request = dataclasses.replace(request, row_seed=seed)
                        running.turns[j] += 1
                    groups.setdefault(key, []).append((running, j, request))
        if not groups:
            return
        if self.on_turn is not None:
            self.on_turn(sum(len(g) for g in groups.values()))
        calls = 0
        for group in groups.values():
            chunk = self.engine.generate_batch or len(group)
            for lo in range(0, len(group), chunk):
                calls += self._generate(group[lo:lo + chunk])
        s = self.stats
        self.stats = SchedulerStats(s.turns + 1, s.generate_calls + calls, s.requests, s.episodes)

    def _generate(self, part: list[tuple[_Running, int, TurnRequest]]) -> int:
        """One ``generate`` call for ``part`` and the envs stepped; on failure, retried request
        by request (the failing one fails alone). Returns the calls made."""
        self.engine.stop_if_cancelled()
        owner = part[0][0]
        if owner.own_stream:
            sampling = owner.pending.work.sampling.for_call(owner.pending.work.seed * SEED_STRIDE + owner.calls)
            owner.calls += 1
        else:
            sampling = part[0][0].pending.work.sampling.for_call(self.engine.base_seed * SEED_STRIDE + self._turn)
            self._turn += 1
        try:
            generations = self.engine.backend.generate([request for _, _, request in part], sampling)
            if len(generations) != len(part):
                raise RuntimeError(f"backend {self.engine.backend.name!r} returned {len(generations)} generations "
                                   f"for {len(part)} requests")
        except RunCancelled:
            raise
        except Exception as exc:  # noqa: BLE001 - isolate the request that makes the call fail
            owners = list(dict.fromkeys(r for r, _, _ in part))
            if len(owners) == 1:
                self._drop(owners[0], exc)
                return 1
            return 1 + sum(self._generate([x for x in part if x[0] is r]) for r in owners)
        for (running, j, _), generation in zip(part, generations, strict=True):
            running.envs[j].step(generation)
        return 1

    def _drop(self, running: _Running, error: Exception) -> None:
        with self._lock:
            self._running = [r for r in self._running if r is not running]
        self._fail([running.pending], error)

    def _resolve(self, pending: Pending, episodes: list[Episode]) -> None:
        assert self._loop is not None
        self._loop.call_soon_threadsafe(_set_result, pending.future, episodes)

    def _fail(self, pendings: Sequence[Pending], error: BaseException) -> None:
        assert self._loop is not None
        for pending in pendings:
            self._loop.call_soon_threadsafe(_set_exception, pending.future, error)


def row_seed(seed: int, episode: int, turn: int) -> int:
    """The random stream of one model turn of a seeded request's episode, keyed by (request seed,
    episode index, the episode's turn count), so turns and episodes never share one."""
    return derived_seed(seed, episode, turn)


def _set_result(future: asyncio.Future, value) -> None:
    if not future.done():
        future.set_result(value)


def _set_exception(future: asyncio.Future, error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)

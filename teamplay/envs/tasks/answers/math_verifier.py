"""Symbolic answer equivalence with a hard time limit per call.

``MathVerifier.equivalent(gold, pred)`` asks math_verify (sympy underneath) whether two LaTeX
answers are equal. sympy can spin for minutes on adversarial input, sometimes inside C code where
no Python-level signal reaches it, and math_verify's own signal-based timeout only works in the
main thread (a rollout runner may verify from worker threads). So the check runs in a persistent
child process (``_math_worker.py``) that the caller waits on with a deadline; on a missed deadline
the child is killed and the check is asked again of a fresh child, once: a deadline missed because
the machine was busy is not a property of the answer pair, and a reward must not depend on the
machine's load. Only a pair that misses the deadline twice scores "not equal" (and is remembered
as such); every miss is logged and counted (``timeouts``, which runs log as
``verifier_deadlines_missed``). A call never raises and never takes much longer than twice
``timeout_s`` (plus a worker's start).

Cost: one round trip through a pipe (~0.1 ms) plus math_verify's own work (~1 ms for typical
answers); results are cached per (gold, pred), and the child caches parsed references, so the
repeated answers of a GRPO group cost one check. Starting the child takes about a second (it runs
one check before it reports ready, so sympy's lazy set-up is not charged to a real check's deadline)
and happens on the first call.

Design choices:
- a subprocess started with ``runpy.run_path`` on the worker file rather than ``multiprocessing``:
  the spawn start method re-imports the user's ``__main__`` (failing in scripts without a
  ``__main__`` guard) and fork is unsafe in a process with CUDA or torch threads;
- one child per verifier, shared by all threads through a lock (the work is CPU-bound and short);
- a forked copy of the caller (e.g. a DataLoader worker) never touches its parent's child: the
  owning pid is checked and a new child is started in the fork;
- answers longer than ``max_chars`` are not sent to sympy at all (no benchmark answer is that long;
  such strings are runaway generations and parsing them is where sympy hangs).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import queue
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import IO

logger = logging.getLogger(__name__)

_WORKER = Path(__file__).with_name("_math_worker.py")
#: longest whole text (``raw=True``) sent to math_verify: 100,000 characters, far above a solution
RAW_MAX_CHARS = 100_000
# run the worker file by path: "-m" would import teamplay (and whatever its __init__ grows to) and
# "python FILE" would put this folder on sys.path, where math.py-like names could shadow the stdlib
_BOOTSTRAP = "import runpy, sys; runpy.run_path(sys.argv[1], run_name='__main__')"


class MathVerifier:
    """Client of one math_verify worker process.

    Args:
        timeout_s: deadline of one check, in seconds (the child is killed when it is missed, and the
            check asked once more of a fresh child).
        startup_timeout_s: deadline for the child to import math_verify and report ready.
        max_chars: longer gold or predicted answers are judged unequal without calling sympy.
        cache_size: number of (gold, pred) results remembered, least recently used dropped first.
    """

    def __init__(self, timeout_s: float = 3.0, startup_timeout_s: float = 60.0, max_chars: int = 1000,
                 cache_size: int = 65536) -> None:
        self.timeout_s = timeout_s
        self.startup_timeout_s = startup_timeout_s
        self.max_chars = max_chars
        self.cache_size = cache_size
        self._lock = threading.Lock()
        self._cache: OrderedDict[tuple[str, str, bool], bool] = OrderedDict()
        self._proc: subprocess.Popen[str] | None = None
        self._replies: queue.Queue[dict | None] = queue.Queue()
        self._owner_pid = os.getpid()
        self._next_id = 0
        #: counters for monitoring: checks sent to the worker (a retry counts again), deadlines missed
        #: (each attempt that missed: a pair that missed twice counts 2), workers started
        self.calls = 0
        self.timeouts = 0
        self.starts = 0

    def equivalent(self, gold: str, pred: str, raw: bool = False) -> bool:
        """True when math_verify finds ``pred`` equal to ``gold`` within the deadline. Never raises.

        ``raw=False``: both are bare LaTeX answers, each parsed whole. ``raw=True``: both are whole
        texts (a worked solution, a completion) in which math_verify finds the answers itself with
        its default settings, as lm-eval's ``math_verify`` metric does; texts up to
        ``RAW_MAX_CHARS`` are accepted then (only their answers reach sympy).
        """
        if not isinstance(gold, str) or not isinstance(pred, str) or not gold.strip() or not pred.strip():
            return False
        limit = RAW_MAX_CHARS if raw else self.max_chars
        if len(gold) > limit or len(pred) > limit:
            logger.debug("text longer than %d chars judged unequal without sympy", limit)
            return False
        key = (gold, pred, raw)
        self._forget_parents_worker()
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
            result, settled = self._ask(gold, pred, raw)
            if settled:
                self._cache[key] = result
                if len(self._cache) > self.cache_size:
                    self._cache.popitem(last=False)
            return result

    @property
    def worker_pid(self) -> int | None:
        """Process id of the running worker (``None`` before the first check or after a kill)."""
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def close(self) -> None:
        """Stop the worker process (a later call starts a new one)."""
        self._forget_parents_worker()
        with self._lock:
            self._stop()

    def _forget_parents_worker(self) -> None:
        # In a forked copy of the owner (a DataLoader worker, say) the worker process and the lock
        # belong to the parent (the lock may even have been copied while held): drop both without
        # touching the process; this copy starts its own worker on first use.
        if os.getpid() != self._owner_pid:
            self._proc, self._replies, self._owner_pid = None, queue.Queue(), os.getpid()
            self._lock = threading.Lock()

    # -- the worker process; every method below runs under self._lock --

    def _ask(self, gold: str, pred: str, raw: bool = False) -> tuple[bool, bool]:
        """(equal, settled): ``settled`` is False when no worker could answer (it died or would not
        start), so the result is not cached. A missed deadline kills the worker and asks a fresh one
        once more; a pair that misses it twice is settled as not equal (the same pair would miss it
        again, and a GRPO group repeats answers)."""
        for attempt in (1, 2):
            answer = self._ask_once(gold, pred, raw)
            if answer is not _TIMED_OUT:
                return answer
            self.timeouts += 1
            then = "retrying on a fresh worker" if attempt == 1 else "again; scoring as wrong"
            logger.warning("math_verify exceeded %.1f s on gold=%.80r pred=%.80r; %s", self.timeout_s, gold,
                           pred, then)
            self._stop()
        return False, True

    def _ask_once(self, gold: str, pred: str, raw: bool) -> tuple[bool, bool] | object:
        """One attempt: (equal, settled) as ``_ask``, or ``_TIMED_OUT`` when the deadline passed."""
        try:
            proc = self._ensure_worker()
            if proc is None:
                return False, False
            self._next_id += 1
            request_id = self._next_id
            request = {"id": request_id, "gold": gold, "pred": pred, **({"raw": True} if raw else {})}
            proc.stdin.write(json.dumps(request) + "\n")
            proc.stdin.flush()
            self.calls += 1
        except OSError as exc:  # the worker died between calls (killed, out of memory)
            logger.warning("math_verify worker unreachable (%s); scoring as wrong, restarting", exc)
            self._stop()
            return False, False
        deadline = time.monotonic() + self.timeout_s
        while True:
            reply = self._next_reply(deadline)
            if reply is _TIMED_OUT:
                return _TIMED_OUT
            if reply is None:
                logger.warning("math_verify worker exited (code %s); scoring as wrong, restarting",
                               self._proc.poll() if self._proc else None)
                self._stop()
                return False, False
            if reply.get("id") == request_id:
                if "error" in reply:
                    logger.debug("math_verify failed on pred=%.80r: %s", pred, reply["error"])
                return bool(reply.get("equal")), True
            # a reply to an older request cannot arrive (a late worker is killed); skip it if it does

    def _next_reply(self, deadline: float) -> dict | None | object:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return _TIMED_OUT
        try:
            return self._replies.get(timeout=remaining)
        except queue.Empty:
            return _TIMED_OUT

    def _ensure_worker(self) -> subprocess.Popen[str] | None:
        """The running worker, started if needed; ``None`` (logged) if it cannot start."""
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        self._stop()
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _BOOTSTRAP, str(_WORKER)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, encoding="utf-8", bufsize=1,
        )
        self.starts += 1
        self._replies = queue.Queue()
        threading.Thread(target=_pump, args=(self._proc.stdout, self._replies), daemon=True,
                         name="math-verify-reader").start()
        ready = self._next_reply(time.monotonic() + self.startup_timeout_s)
        if isinstance(ready, dict) and ready.get("ready"):
            return self._proc
        logger.error("math_verify worker did not start (%s); MATH answers that differ from the "
                     "reference as strings score 0 until it does",
                     "timed out" if ready is _TIMED_OUT else f"exit code {self._proc.poll()}")
        self._stop()
        return None

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - a killed process always exits
            logger.error("math_verify worker %d did not exit after SIGKILL", proc.pid)
        for stream in (proc.stdin, proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass


_TIMED_OUT = object()


def _pump(stream: IO[str], replies: queue.Queue[dict | None]) -> None:
    """Reader thread: move the worker's reply lines into ``replies``; ``None`` marks its exit."""
    try:
        for line in stream:
            try:
                replies.put(json.loads(line))
            except ValueError:
                logger.debug("ignoring a non-JSON line from the math_verify worker: %.200r", line)
    except (OSError, ValueError):
        pass  # the stream was closed under us because the worker is being stopped
    replies.put(None)


_default: MathVerifier | None = None
_default_lock = threading.Lock()


def default_verifier() -> MathVerifier:
    """The process-wide verifier all MATH tasks share (one worker process, started on first use)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = MathVerifier()
            atexit.register(_default.close)
        return _default

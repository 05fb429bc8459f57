"""The team behind ``teamplay serve``: a chat request becomes a ``TaskItem`` and ``n`` episodes. The
server runs them with continuous batching (``teamplay.serving.episodes.scheduler``, which drives this
engine's envs, backend and seeds); ``TeamEngine.run`` runs a list of requests as
``RolloutRunner.run`` calls (lock-step turns, one batched ``generate`` per turn) for callers that
have them all at once.

The question. The team answers ONE problem per request: the text of the last ``user`` message.
System, developer and earlier messages are ignored: the protocol writes each agent's own system
prompt and the served task's answer instruction, exactly as in ``teamplay eval``, so a served team
sees the prompts it was trained and evaluated with.

The reference. The served task's items (``task:`` of the config) are loaded once at start-up and
indexed by their prompt text (whitespace runs made one space). A question equal to one of them
gets that item, with its id and reference: scripted policies that read the reference (``oracle``)
work, and the episode's reward is reported. Any other question becomes an item with no reference
(``reference=""``, id ``serve/<hash>``): a model-played team answers it just the same, no reward is
reported, and a scripted ``oracle`` states an empty answer.

Seeds. An unseeded request's episodes take consecutive env seeds from the config's ``seed``, in
the order the server runs them (``env_seeds``), and are batched with every other unseeded request of
the same decoding settings. A seeded request's episodes get env seeds ``seed, seed + 1, ...``. With
sampled decoding its model calls are its own (in ``run``: a run of its own; in the server: its own
``generate`` call in each shared turn), its decoding seeded with ``seed``, so the same request with
the same seed gets the same episodes on the same backend, whatever else was queued. With greedy
decoding (temperature 0) no random stream is drawn, so it joins the batch of
its decoding settings with its own env seeds (lm-eval sends ``seed`` with every greedy request).
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from teamplay.agents.backends.base import GenerationBackend
from teamplay.config import EvalConfig
from teamplay.envs.tasks.base import Task
from teamplay.envs.team_env import TeamEnv
from teamplay.records import Episode, SamplingParams, TaskItem
from teamplay.training.play.rollout import RolloutJob, RolloutRunner
from teamplay.training.wiring.eval_team import build_eval_team
from teamplay.training.wiring.sampling import sampling_params


@dataclass(frozen=True)
class EpisodeRequest:
    """The team's work for one chat request.

    Fields:
        request_id: the completion id; the group id of the request's episodes.
        item: the problem (see the module doc for when it carries a reference).
        n: episodes to run (one choice each).
        sampling: decoding of every message (the config's, with the request's overrides).
        seed: the request's seed (``None``: batched with other unseeded requests).
    """

    request_id: str
    item: TaskItem
    n: int
    sampling: SamplingParams
    seed: int | None = None


class RunCancelled(Exception):
    """The engine was cancelled (the server is shutting down): the run stopped before a model call."""


@dataclass(frozen=True)
class EngineStats:
    """What the engine has run since start-up: ``runs`` ``RolloutRunner.run`` calls for ``requests``
    requests and ``episodes`` episodes (fewer runs than requests means batching happened)."""

    runs: int = 0
    requests: int = 0
    episodes: int = 0


def normalize_question(text: str) -> str:
    """The lookup key of a question: whitespace runs made one space, ends stripped.

    >>> normalize_question("  What is 2 +\\n 3? ")
    'What is 2 + 3?'
    """
    return " ".join(text.split())


class TeamEngine:
    """Runs chat requests as team episodes; NOT thread-safe (neither are the backends): call ``run``
    from one thread at a time (the server's single worker thread).

    Args:
        task: the served task (prompt format, answer extraction, reward).
        items: its problems; a question equal to one of their prompts gets its reference.
        make_env: builds a fresh ``TeamEnv`` of the served team (``build_team_engine``).
        backend: the generation backend.
        sampling: the config's decoding; requests may lower ``max_new_tokens`` and change
            ``temperature`` and ``top_p``.
        protocol: the protocol's name (reported in each completion).
        generate_batch: most turn requests per ``generate`` call (``backend.max_batch``).
        seed: first env seed of unseeded episodes (the config's ``seed``).
    """

    def __init__(self, task: Task, items: Sequence[TaskItem], make_env: Callable[[], TeamEnv],
                 backend: GenerationBackend, sampling: SamplingParams, protocol: str,
                 generate_batch: int | None = None, seed: int = 0) -> None:
        self.task = task
        self.protocol = protocol
        self.make_env = make_env
        self.backend = backend
        self.sampling = sampling
        self.generate_batch = generate_batch
        self._next_seed = seed
        self.base_seed = seed
        self._items: dict[str, TaskItem] = {}
        for item in items:  # the first of repeated problems wins, as in the task's order
            self._items.setdefault(normalize_question(item.prompt), item)
        self._stats = EngineStats()
        self._lock = threading.Lock()
        self._cancelled = threading.Event()

    @property
    def stats(self) -> EngineStats:
        return self._stats

    def cancel(self) -> None:
        """Stop the run in progress before its next model call (``RunCancelled``), and every later
        one: the server is shutting down. Thread-safe."""
        self._cancelled.set()

    def stop_if_cancelled(self) -> None:
        """Raises ``RunCancelled`` once ``cancel`` was called (a safe point before a model call)."""
        if self._cancelled.is_set():
            raise RunCancelled("the server is shutting down")

    def env_seeds(self, request: EpisodeRequest) -> list[int]:
        """The env seeds of a request's episodes: ``seed, seed + 1, ...`` for a seeded request, the
        next unused ones from the config's ``seed`` otherwise (see the module doc)."""
        if request.seed is not None:
            return [request.seed + j for j in range(request.n)]
        first, self._next_seed = self._next_seed, self._next_seed + request.n
        return list(range(first, first + request.n))

    def item_for(self, question: str) -> tuple[TaskItem, bool]:
        """The served task's item with this prompt text, or a new item with no reference; and
        whether the reference is known."""
        known = self._items.get(normalize_question(question))
        if known is not None:
            return known, True
        digest = hashlib.sha256(question.encode("utf-8")).hexdigest()[:16]
        return TaskItem(id=f"serve/{digest}", prompt=question, reference=""), False

    def sampling_for(self, max_tokens: int | None, temperature: float | None,
                     top_p: float | None) -> SamplingParams:
        """The config's decoding with a request's overrides; ``max_tokens`` never raises the
        config's ``max_new_tokens``, only lowers it."""
        cap = self.sampling.max_new_tokens
        return dataclasses.replace(
            self.sampling, max_new_tokens=cap if max_tokens is None else min(max_tokens, cap),
            temperature=self.sampling.temperature if temperature is None else temperature,
            top_p=self.sampling.top_p if top_p is None else top_p)

    def run(self, requests: Sequence[EpisodeRequest]) -> list[list[Episode]]:
        """Every request's episodes (``n`` each, in request order), with as few ``RolloutRunner.run``
        calls as the requests allow: one per distinct decoding setting of the unseeded and greedy
        requests, plus one per seeded sampled request."""
        with self._lock:  # a second caller waits: the backend is not thread-safe
            out: list[list[Episode]] = [[] for _ in requests]
            for members in _groups(requests):
                for k, episodes in zip(members, self._run_group([requests[k] for k in members]), strict=True):
                    out[k] = episodes
            return out

    def _run_group(self, group: Sequence[EpisodeRequest]) -> list[list[Episode]]:
        """One ``RolloutRunner.run`` for requests of one decoding setting (one seeded request, or
        unseeded ones); episodes split back per request."""
        unseeded = sum(r.n for r in group if r.seed is None)
        first, self._next_seed = self._next_seed, self._next_seed + unseeded
        jobs, next_free = [], first
        for r in group:
            start = r.seed if r.seed is not None else next_free
            jobs += [RolloutJob(item=r.item, group_id=r.request_id, env_seed=start + j) for j in range(r.n)]
            if r.seed is None:
                next_free += r.n
        sampled_seed = group[0].seed if len(group) == 1 and not group[0].sampling.greedy else None
        sampling = group[0].sampling if sampled_seed is None else dataclasses.replace(group[0].sampling,
                                                                                      seed=sampled_seed)
        runner = RolloutRunner(self.make_env, self.backend, sampling, max_batch=self.generate_batch,
                               before_generate=self.stop_if_cancelled)
        episodes = runner.run(jobs, seed=first if sampled_seed is None else sampled_seed)
        s = self._stats
        self._stats = EngineStats(s.runs + 1, s.requests + len(group), s.episodes + len(episodes))

        split, start = [], 0
        for r in group:
            split.append(episodes[start:start + r.n])
            start += r.n
        return split


def build_team_engine(cfg: EvalConfig) -> TeamEngine:
    """The ``TeamEngine`` that ``serve`` puts behind its API: the team ``eval`` would evaluate
    (``build_eval_team``), the task's items indexed for reference look-up."""
    team = build_eval_team(cfg)
    return TeamEngine(team.task, team.items, team.make_env, team.backend, sampling_params(cfg.sampling),
                      cfg.protocol.name, generate_batch=cfg.backend.max_batch, seed=cfg.seed)


def _groups(requests: Sequence[EpisodeRequest]) -> list[list[int]]:
    """Indices of the requests that share one run: unseeded and greedy requests by decoding setting,
    in order of first appearance; each seeded sampled request alone."""
    groups: dict[object, list[int]] = {}
    for k, r in enumerate(requests):
        key = ("batched", r.sampling) if r.seed is None or r.sampling.greedy else ("alone", k)
        groups.setdefault(key, []).append(k)
    return list(groups.values())

"""The replay engine: counterfactual re-executions of a step's episodes, batched, with prefix reuse.

Credit methods that need re-execution (``shapley`` with ``value: replay``, ``continuation``,
``loto`` with ``value: replay``) hand :class:`RolloutReplayEngine` batches of
:class:`~teamplay.credit.values.replay_query.ReplayQuery`; it answers with the verifier scores of k samples per
query. How one query becomes an episode:

* **prefix reuse**: a coalition S shares with the recording every message before the first turn of
  a removed agent; that prefix is replayed verbatim (``ReplaySpec.prefix``: no generation), and only
  the rest is generated. A query whose replay would be the recording itself (the grand coalition,
  or removed agents that never spoke under ``skip``) is the recorded reward, at no cost; a
  coalition in which no agent can give the team's answer (the protocol's ``answer_roles``, e.g. a
  reviewer alone) is 0, at no cost.
* **removal** (``ReplaySpec.removal``): ``skip`` (the turn does not happen: the protocol's
  ``skip_means``), ``null_message`` (a fixed neutral text) or ``base_policy`` (adapter ``None``).
* **batching**: all queries of a ``scores`` call, whatever their episodes, go through one
  ``RolloutRunner.run`` per sample index, in lock step (one ``generate`` per turn and adapter).
  The trainer first runs every credit group with the engine *recording* (placeholder values), then
  :meth:`flush` runs everything the step asked for in one batch, then the credit methods run again
  and read the cache.
* **common random numbers**: sample j of every query runs in the same ``run`` with seed
  ``(step, j)``: the same seed per sample index for every coalition (exact pairing with per-request
  samplers such as scripted policies; with batched hf sampling the stream is shared per micro-batch).
* **cache** per (episode, coalition, start, removal) for the step; :meth:`begin_step` clears it.
* **budget**: ``budget`` caps the step's extra generated tokens at ``budget x rollout tokens``; the
  engine runs sample indices one at a time and stops before one that would pass the cap (at least
  one sample always runs), logging how many it used. It never falls back to another value.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from teamplay.agents.backends.base import GenerationBackend
from teamplay.credit.values.replay_query import ReplayQuery
from teamplay.envs.protocols.driver import ReplaySpec
from teamplay.envs.team_env import TeamEnv
from teamplay.records import Episode, SamplingParams
from teamplay.training.play.rollout import RolloutJob, RolloutRunner

log = logging.getLogger("teamplay.replay")


@dataclass(frozen=True)
class ResolvedQuery:
    """A query made concrete: the prefix length P it replays and what it removes.

    ``free`` is True when no generation is needed: the replay would reproduce the recording
    (value = recorded reward), or ``zero``: no agent left can answer (value 0).
    """

    query: ReplayQuery
    prefix: int
    removed: frozenset[str]
    remove_next: bool
    free: bool
    zero: bool = False

    @property
    def known_value(self) -> float:
        return 0.0 if self.zero else float(self.query.episode.reward)

    def spec(self) -> ReplaySpec:
        return ReplaySpec(prefix=self.query.episode.messages[:self.prefix], removed=self.removed,
                          removal=self.query.removal, remove_next=self.remove_next)

    @property
    def prefix_tokens(self) -> int:
        return sum(m.n_tokens for m in self.query.episode.messages[:self.prefix])


def resolve(query: ReplayQuery, reuse_prefix: bool = True,
            answering: frozenset[str] | None = None) -> ResolvedQuery:
    """Where ``query``'s replay starts and whether it needs any generation.

    The first *relevant* turn of a removed agent is its first spoken message under ``skip`` (a
    recorded skipped turn is what skipping gives anyway) and its first message otherwise; the
    longest shared prefix ends there (or at ``query.start`` when that is earlier).

    ``answering``: the agents whose messages can become the team's answer (the protocol's
    ``answer_roles``; None: all). A coalition without any of them, under ``skip`` or
    ``null_message`` (the neutral text holds no answer), has no answer: value 0, no generation
    (``zero``). The prefix before their first turn holds none of their answers either.
    """
    ep = query.episode
    T = len(ep.messages)
    removed = frozenset(ep.agents) - query.kept
    unknown = query.kept - frozenset(ep.agents)
    if unknown:
        raise ValueError(f"replay coalition names agents {sorted(unknown)} not in the team {list(ep.agents)}")
    first = next((t for t, m in enumerate(ep.messages)
                  if m.agent in removed and (m.spoke or query.removal != "skip")), T)
    start = T if query.start is None else query.start
    if not 0 <= start <= T:
        raise ValueError(f"replay start {start} outside [0, {T}] for episode {ep.problem_id}")
    prefix = min(first, start)
    free = prefix == T and not query.remove_turn
    zero = (answering is not None and not (query.kept & answering) and query.removal != "base_policy"
            and query.start is None and not query.remove_turn)
    if not reuse_prefix and not free:
        prefix = 0
    return ResolvedQuery(query, prefix, removed, query.remove_turn, free or zero, zero)


@dataclass
class ReplayStats:
    """What the engine spent in the current step.

    Fields:
        rollout_tokens: tokens the step's rollout generated (the budget's unit).
        extra_tokens: tokens generated by replays (replayed prefixes excluded).
        queries: distinct queries answered; ``free``: of them, answered by the recording.
        episodes: replay episodes run; ``generate_calls``: backend calls they took.
        samples_used: the k' of the last batch (None before any).
        capped: True when the budget stopped a batch before its k samples.
    """

    rollout_tokens: int = 0
    extra_tokens: int = 0
    queries: int = 0
    free: int = 0
    episodes: int = 0
    generate_calls: int = 0
    samples_used: int | None = None
    capped: bool = False

    def to_dict(self) -> dict[str, Any]:
        ratio = self.extra_tokens / self.rollout_tokens if self.rollout_tokens else 0.0
        return {"replay_tokens": self.extra_tokens, "replay_token_ratio": ratio,
                "replay_queries": self.queries, "replay_free_queries": self.free,
                "replay_episodes": self.episodes, "replay_generate_calls": self.generate_calls,
                "replay_samples": self.samples_used, "replay_budget_capped": self.capped}


@dataclass
class _Recorded:
    queries: list[ReplayQuery] = field(default_factory=list)
    samples: int = 1
    budget: float | None = None


class RolloutReplayEngine:
    """A :class:`~teamplay.credit.values.replay_query.ReplayEngine` on a ``RolloutRunner``.

    Args:
        make_env: the env factory of the rollouts (same task, protocol, team, controllers).
        backend: the generation backend (the current policies; ``base_policy`` asks it for adapter None).
        sampling: decoding of the replays (the rollout's sampling; its seed is set per sample index).
        max_batch: most requests per ``generate`` call (None: all).
        seed: base of the per-(step, sample) seeds.
        reuse_prefix: False replays every non-free query from the question (for cost comparisons).
    """

    def __init__(self, make_env: Callable[[], TeamEnv], backend: GenerationBackend,
                 sampling: SamplingParams, max_batch: int | None = None, seed: int = 0,
                 reuse_prefix: bool = True) -> None:
        self.runner = RolloutRunner(make_env, backend, sampling, max_batch=max_batch)
        self.seed = seed
        self.reuse_prefix = reuse_prefix
        self.step = 0
        self.stats = ReplayStats()
        self._cache: dict[tuple, tuple[ReplayQuery, list[float], int]] = {}
        self._recording: _Recorded | None = None
        self._pending: _Recorded | None = None

    # ------------------------------------------------------------------ the step
    def begin_step(self, step: int, rollout_tokens: int) -> None:
        """Forget the previous step's replays; ``rollout_tokens`` is the budget's unit."""
        self.step = step
        self._cache.clear()
        self.stats = ReplayStats(rollout_tokens=rollout_tokens)

    @contextmanager
    def recording(self) -> Iterator[None]:
        """Within the block, ``scores`` only records queries and answers a placeholder (0.0)."""
        self._recording = _Recorded()
        try:
            yield
        finally:
            recorded, self._recording = self._recording, None
            self._pending = recorded

    def prefetch(self, credit: Callable[[Any], Any], batches: Sequence[Any]) -> None:
        """Every replay ``credit(batch)`` will ask for over ``batches``, run in one batch: a first
        pass records its queries (placeholder values, results discarded), :meth:`flush` runs them
        together, and the caller's real pass reads the cache. A method whose queries depend on the
        values it gets asks the rest on demand in the real pass (still batched per call)."""
        with self.recording():
            for batch in batches:
                try:
                    credit(batch)
                except (ValueError, RuntimeError, ArithmeticError):
                    continue  # placeholder values may upset a method; the real pass reports real errors
        self.flush()

    def flush(self) -> None:
        """Run every query recorded by the last ``recording`` block, in one batch."""
        recorded = getattr(self, "_pending", None)
        self._pending = None
        if recorded is not None and recorded.queries:
            self._run(recorded.queries, recorded.samples, recorded.budget)

    # ------------------------------------------------------------------ ReplayEngine
    def scores(self, queries: Sequence[ReplayQuery], samples: int, budget: float | None) -> list[np.ndarray]:
        if samples < 1:
            raise ValueError(f"replay samples must be >= 1, got {samples}")
        if self._recording is not None:
            rec = self._recording
            rec.queries.extend(queries)
            rec.samples = max(rec.samples, samples)
            rec.budget = budget if rec.budget is None else min(rec.budget, budget or rec.budget)
            return [np.zeros(1) for _ in queries]
        self._run(queries, samples, budget)
        return [np.asarray(self._cache[q.key()][1], dtype=np.float64) for q in queries]

    def coalition_values(self, episode: Episode) -> list[dict[str, Any]]:
        """The values this step computed for ``episode``: kept agents, start, removal, value, k."""
        out = []
        for q, scores, prefix in self._cache.values():
            if q.episode is episode:
                out.append({"kept": sorted(q.kept), "start": prefix, "removal": q.removal,
                            "remove_turn": q.remove_turn, "value": float(np.mean(scores)),
                            "samples": len(scores)})
        return out

    # ------------------------------------------------------------------ running
    def _run(self, queries: Sequence[ReplayQuery], samples: int, budget: float | None) -> None:
        todo: dict[tuple, ResolvedQuery] = {}
        for q in queries:
            key = q.key()
            if key in self._cache or key in todo:
                continue
            r = resolve(q, self.reuse_prefix, self._answering())
            if r.free:
                self._cache[key] = (q, [r.known_value], r.prefix)
                self.stats.free += 1
                self.stats.queries += 1
            else:
                todo[key] = r
        if not todo:
            return
        work = list(todo.values())
        jobs = [RolloutJob(item=r.query.item, group_id=f"replay:{i}", replay=r.spec()) for i, r in enumerate(work)]
        prefix_tokens = sum(r.prefix_tokens for r in work)
        cap = None if budget is None else budget * self.stats.rollout_tokens
        scores: list[list[float]] = [[] for _ in work]
        last = 0
        for j in range(samples):
            if j > 0 and cap is not None and self.stats.extra_tokens + last > cap:
                log.warning("replay budget: %d of %d samples per coalition (%d extra tokens of a cap of "
                            "%.0f = %.2f x %d rollout tokens)", j, samples, self.stats.extra_tokens, cap,
                            budget, self.stats.rollout_tokens)
                self.stats.capped = True
                break
            episodes = self.runner.run(jobs, seed=self._seed(j))
            last = sum(ep.tokens for ep in episodes) - prefix_tokens
            self.stats.extra_tokens += last
            self.stats.episodes += len(episodes)
            assert self.runner.last_stats is not None
            self.stats.generate_calls += self.runner.last_stats.generate_calls
            for i, ep in enumerate(episodes):
                scores[i].append(float(ep.reward))
        if cap is not None and self.stats.extra_tokens > cap and not self.stats.capped:
            log.warning("replay budget: the first sample alone took %d extra tokens, over the cap of "
                        "%.0f (%.2f x %d rollout tokens); kept 1 sample per coalition",
                        self.stats.extra_tokens, cap, budget, self.stats.rollout_tokens)
            self.stats.capped = True
        self.stats.samples_used = len(scores[0])
        self.stats.queries += len(work)
        for key, r, s in zip(todo, work, scores, strict=True):
            self._cache[key] = (r.query, s, r.prefix)

    def _answering(self) -> frozenset[str] | None:
        """Agents of roles that can give the team's answer (the protocol's ``answer_roles``)."""
        if not hasattr(self, "_answering_agents"):
            env = self.runner.make_env()
            roles = env.protocol.answer_roles
            self._answering_agents = None if roles is None else frozenset(
                a for a in env.possible_agents if env.team.role_of(a).name in roles)
        return self._answering_agents

    def _seed(self, sample: int) -> int:
        return int(np.random.SeedSequence([self.seed, self.step, sample]).generate_state(1)[0])

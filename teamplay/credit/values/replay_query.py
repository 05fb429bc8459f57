"""What counterfactual credit asks of a replay engine, and the values it gets back.

A credit method that needs re-execution (``shapley`` with ``value: replay``, ``continuation``,
``loto`` with ``value: replay``) describes each value it needs as a :class:`ReplayQuery` and hands
a batch of them to a :class:`ReplayEngine` (the trainer's is
``teamplay.training.play.replay.RolloutReplayEngine``; tests may pass any object with ``scores``). The
engine decides how to run them (batched, prefix reuse, common random numbers, a token budget);
this module only fixes the contract, so credit never imports training.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

import numpy as np

from teamplay.records import Episode, TaskItem

Removal = Literal["skip", "null_message", "base_policy"]


@dataclass(frozen=True, eq=False)
class ReplayQuery:
    """One counterfactual re-execution of ``episode``'s problem.

    Fields:
        episode: the recorded episode (its messages are the prefix a replay may reuse).
        item: the problem (the verifier scores replays against ``item.reference``).
        kept: agents that play; the others are removed from ``start`` on.
        start: replay from ``episode.messages[:start]``; ``None`` = the longest prefix the coalition
            shares with the recording (everything before the first turn of a removed agent).
        removal: what a removed agent's turn becomes (``skip``, ``null_message``, ``base_policy``).
        remove_turn: also remove turn ``start`` itself, whoever wrote it (leave-one-turn-out).
    """

    episode: Episode
    item: TaskItem
    kept: frozenset[str]
    start: int | None = None
    removal: Removal = "skip"
    remove_turn: bool = False

    def key(self) -> tuple:
        """Cache key: the episode object, the coalition and how it is replayed."""
        return (id(self.episode), self.kept, self.start, self.removal, self.remove_turn)


@runtime_checkable
class ReplayEngine(Protocol):
    """Estimates team rewards of counterfactual re-executions.

    ``scores(queries, samples, budget)`` returns, per query, the verifier scores of its k' samples
    (float64 [k'], 1 <= k' <= samples, in [0, 1]); every query of one call gets the same k' and
    sample j of every query uses the same random seed (common random numbers). ``budget`` caps the
    extra generated tokens of the training step as a multiple of its rollout tokens (None: no cap);
    when the cap is reached the engine uses fewer samples and logs it.
    """

    def scores(self, queries: Sequence[ReplayQuery], samples: int, budget: float | None
               ) -> list[np.ndarray]: ...


def replay_samples(engine: ReplayEngine, queries: Sequence[ReplayQuery], samples: int,
                   budget: float | None) -> list[np.ndarray]:
    """The scores of each query's k' samples, float64 [k'] per query, validated (at least one, each
    finite and in [0, 1])."""
    out = engine.scores(queries, samples, budget)
    if len(out) != len(queries):
        raise RuntimeError(f"replay engine returned {len(out)} results for {len(queries)} queries")
    checked = []
    for i, s in enumerate(out):
        arr = np.asarray(s, dtype=np.float64)
        if arr.ndim != 1 or arr.size == 0 or not np.all((arr >= 0) & (arr <= 1)):
            raise ValueError(f"replay engine returned {arr.tolist()} for query {i}; it must return "
                             "at least one score in [0, 1] per query")
        checked.append(arr)
    return checked


def replay_values(engine: ReplayEngine, queries: Sequence[ReplayQuery], samples: int,
                  budget: float | None) -> np.ndarray:
    """Mean score of each query, float64 [len(queries)], validated (finite, in [0, 1])."""
    return np.array([s.mean() for s in replay_samples(engine, queries, samples, budget)], dtype=np.float64)


def need_replay_engine(resources, what: str) -> ReplayEngine:
    """The batch's ``replay`` resource, checked to be a :class:`ReplayEngine` (``what``: the method
    and option that need it, for the one-line error). ``resources``: a ``CreditBatch.resources``."""
    engine = resources.need("replay", what)
    if not isinstance(engine, ReplayEngine):
        raise ValueError(f"credit {what} needs a replay engine "
                         "(teamplay.credit.values.replay_query.ReplayEngine) as the replay resource")
    return engine

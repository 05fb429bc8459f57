"""Continuation values: prospective, expected-utility credit per utterance (SAVOIR, VinePPO).

For message boundary ``t`` of an episode (the transcript ``messages[:t]``), ``V(t)`` is the mean
verifier score of k continuations sampled from that prefix with the current policies (the replay
engine runs them, all boundaries of all episodes of a step in one batch). ``V(T) = R``, the
episode's own reward: the full transcript needs no continuation.

A message is worth what it changed the team's expected outcome by:

    A_t = V(b_next(t)) - V(t)     for a spoken message t,  0 for a skipped one,

where ``b_next(t)`` is the next spoken message's index (or T). Boundaries sit at spoken messages
only, so the advantages of an episode telescope exactly: ``sum_t A_t = R - V(0)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import Field

from teamplay.credit.registry import CardText, CreditBatch, MethodOptions, register_credit
from teamplay.credit.values.replay_query import ReplayEngine, ReplayQuery, need_replay_engine, replay_values
from teamplay.records import Episode


def boundaries(ep: Episode) -> list[int]:
    """Prefix lengths at which V is needed: 0 and each spoken message after the first, [m].

    ``m`` = number of spoken messages (at least 1: an episode with no spoken message has [0]).
    """
    spoken = [t for t, m in enumerate(ep.messages) if m.spoke]
    return [0, *spoken[1:]] if spoken else [0]


def continuation_advantages(ep: Episode, values: Sequence[float]) -> np.ndarray:
    """[T] advantages from ``values`` [m] = V at ``boundaries(ep)``, with ``V(T) = ep.reward``.

    Spoken message j (the j-th spoken one) gets ``V(b_{j+1}) - V(b_j)`` (``b_m = T``); skipped
    messages get 0. Invariant: ``sum = ep.reward - values[0]`` (exact telescoping).
    """
    b = boundaries(ep)
    v = np.asarray(values, dtype=np.float64)
    if v.shape != (len(b),):
        raise ValueError(f"continuation_advantages: {len(b)} boundaries but {v.shape} values")
    spoken = [t for t, m in enumerate(ep.messages) if m.spoke]
    out = np.zeros(len(ep.messages))
    ahead = np.append(v[1:], ep.reward)  # [m]: the value after each spoken message
    for j, t in enumerate(spoken):
        out[t] = ahead[j] - v[j]
    return out


class ContinuationOptions(MethodOptions):
    """Options of the ``continuation`` method."""

    samples: int = Field(4, ge=1, le=256, description="Continuations k per message boundary.")
    budget: float | None = Field(
        None, gt=0, description="Cap on the extra generated tokens of a training step, as a multiple of "
                                "its rollout tokens; above it fewer samples are used (logged).")
    baseline: Literal["group_mean", "continuation"] = Field(
        "group_mean", description="V(0) of the first message: 'group_mean' (the group's mean reward, "
                                  "the same question's value estimated by the group for free; the "
                                  "episode totals are then group-centred exactly) or 'continuation' "
                                  "(k fresh episodes from the question alone).")
    mode: Literal["std", "mean_only"] = Field(
        "std", description="'std' divides by the group's reward std (+ eps); 'mean_only' does not.")
    eps: float = Field(1e-8, gt=0, description="Added to the std.")


def episode_values(batch: CreditBatch, options: ContinuationOptions, engine: ReplayEngine
                   ) -> list[np.ndarray]:
    """V at ``boundaries(ep)`` for every episode of the group, one batched ``scores`` call.

    ``V(0)`` is estimated only with ``baseline='continuation'``; otherwise it is the group's mean
    reward.
    """
    if batch.item is None:
        raise ValueError("credit method 'continuation' re-runs the problem: the CreditBatch needs its item")
    queries, where = [], []
    for g, ep in enumerate(batch.episodes):
        team = frozenset(ep.agents)
        for j, t in enumerate(boundaries(ep)):
            if t == 0 and options.baseline == "group_mean":
                continue
            queries.append(ReplayQuery(ep, batch.item, team, start=t))
            where.append((g, j))
    means = replay_values(engine, queries, options.samples, options.budget) if queries else np.zeros(0)
    r_mean = float(np.mean([ep.reward for ep in batch.episodes]))
    out = [np.full(len(boundaries(ep)), r_mean) for ep in batch.episodes]
    for (g, j), v in zip(where, means, strict=True):
        out[g][j] = v
    return out


CONTINUATION_CARD = CardText(
    "The difference of continuation values E[R | h_{t+1}] - E[R | h_t] for each spoken message, V "
    "estimated as the mean verifier score of k continuations sampled from the prefix (V(T) = R, "
    "V(0) the group's mean reward by default), divided by the group's reward std; an episode's "
    "advantages telescope to R - V(0).",
    ("restorable state at every message boundary (the protocol re-runs from a transcript prefix)",
     "the continuing policies are the current ones and held fixed: the value is relative to them",
     "k samples give an unbiased but noisy V (standard error of order 1 / sqrt(k))"),
    ("tests/training/test_replay_engine.py::test_continuation_value_matches_the_analytic_value",
     "tests/training/test_replay_credit.py::test_continuation_advantages_telescope_in_the_trainer"),
    "at most budget x the step's rollout tokens when budget is set",
    fails_where=("its advantage, divided by the group's reward std, is not unbiased for A*: the std is "
                 "estimated from the same episodes; a group with all-equal rewards gets 0 in mode std",
                 "k = 4 continuations per boundary are noisy: r 0.37 [0.02, 0.64] on the solver at q = "
                 "0.5, below grpo's 0.42 (section 12)"))


@register_credit("continuation", ContinuationOptions,
                 "continuation values: each message gets V(after) - V(before), V = mean score of k "
                 "sampled continuations",
                 requires=lambda options: frozenset({"replay"}),
                 cost="k continuations per message boundary (partial episodes)", card=CONTINUATION_CARD)
def continuation_credit(batch: CreditBatch, options: ContinuationOptions) -> list[np.ndarray]:
    """``continuation_advantages`` per episode, divided by the group's reward std (``mode='std'``).

    Needs the ``replay`` resource, a :class:`~teamplay.credit.values.replay_query.ReplayEngine`.

    Invariants: per episode ``sum_t A_t = (R - V(0)) / s`` (``s`` = std + eps, or 1); with
    ``baseline='group_mean'``, ``V(0)`` is the group's mean reward, so the episode totals sum to 0
    over the group; skipped messages get 0.

    Edge case: with ``mode='std'`` a group whose rewards are all equal gets zeros (its std scale
    is undefined: dividing continuation differences by ``0 + eps`` would make them 1e8 times too
    large); ``mode='mean_only'`` credits such a group.
    """
    engine = need_replay_engine(batch.resources, "method 'continuation'")
    rewards = [ep.reward for ep in batch.episodes]
    if options.mode == "std" and all(r == rewards[0] for r in rewards):
        return [np.zeros(len(ep.messages)) for ep in batch.episodes]
    values = episode_values(batch, options, engine)
    scale = 1.0
    if options.mode == "std":
        scale = float(np.std(rewards)) + options.eps
    return [continuation_advantages(ep, v) / scale for ep, v in zip(batch.episodes, values, strict=True)]

"""``a2tgpo``: A2TGPO's information gain per turn (docs/credit/specification.md#turn-baselines).

:func:`a2tgpo_advantage` — information gain per turn, z-normalised within (group, turn index),
discounted sum over the remaining turns divided by the square root of their count, and a per-turn
clip range that widens for informative turns. The registered method :func:`a2tgpo_credit` takes the
probabilities from the ``answer_probability`` resource.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import Field

from teamplay.credit.methods.turn_arrays import ragged, spoken_only_mask
from teamplay.credit.registry import CardText, CreditBatch, MethodOptions, register_credit


def information_gain(p: Sequence[Sequence[float]]) -> list[np.ndarray]:
    """Per-turn information gain from per-rollout answer probabilities.

    ``p[i]`` [T_i + 1] holds ``p_θ(y* | h_t)`` for ``t = 0..T_i`` (entry 0 before any turn); returns
    ``IG[i] = diff(p[i])`` [T_i].
    """
    arrays = ragged(p, "p")
    for i, a in enumerate(arrays):
        if a.size < 2:
            raise ValueError(f"p[{i}] needs the pre-turn probability and at least one turn, got {a.size}")
    return [np.diff(a) for a in arrays]


@dataclass(frozen=True)
class A2TGPOResult:
    """Ragged outputs of :func:`a2tgpo_advantage`, one array [T_i] per rollout.

    Fields:
        z: information gain z-normalised within each turn index.
        advantages: ``Â_{i,t}``.
        clip: per-turn clip range ``ε_{i,t}``.
    """

    z: tuple[np.ndarray, ...]
    advantages: tuple[np.ndarray, ...]
    clip: tuple[np.ndarray, ...]


def a2tgpo_advantage(IG: Sequence[Sequence[float]], gamma: float = 1.0, eps0: float = 0.2,
                     kappa: float = 1.0, outcome: Sequence[float] | None = None,
                     eps: float = 1e-8) -> A2TGPOResult:
    """A2TGPO turn advantages from ragged information gains ``IG[i]`` [T_i] of one group.

    ``z_{i,t} = (IG_{i,t} − mean_j IG_{j,t}) / max(std_j IG_{j,t}, eps)`` over the rollouts that
    have a turn t (population std; a turn index reached by one rollout only, or with all-equal
    gains, gives 0). With ``outcome`` [G] given, ``outcome_i`` is added to ``z`` at rollout i's
    last turn ([INFERRED]: the spec leaves the outcome term as an option). Then

        Â_{i,t} = Σ_{k=t..T_i} γ^{k−t} z_{i,k} / sqrt(T_i − t + 1)
        ε_{i,t} = eps0 · (1 + κ · tanh|z_{i,t}|)        ([INFERRED] form; κ default 1.0 [INFERRED])

    Rollouts with zero turns get empty arrays.
    """
    gains = ragged(IG, "IG")
    if not 0 <= gamma <= 1:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    if outcome is not None and len(outcome) != len(gains):
        raise ValueError(f"outcome has {len(outcome)} entries but IG has {len(gains)} rollouts")
    T_max = max((g.size for g in gains), default=0)
    z = [np.zeros(g.size) for g in gains]
    for t in range(T_max):
        members = [i for i, g in enumerate(gains) if g.size > t]
        vals = np.array([gains[i][t] for i in members])
        if len(members) < 2:
            continue  # a singleton turn group carries no comparison
        normed = (vals - vals.mean()) / max(vals.std(), eps)
        for i, v in zip(members, normed, strict=True):
            z[i][t] = v
    if outcome is not None:
        out = np.asarray(outcome, dtype=np.float64)
        if not np.all(np.isfinite(out)):
            raise ValueError("outcome holds non-finite values")
        for i, zi in enumerate(z):
            if zi.size:
                zi[-1] += out[i]
    advantages, clips = [], []
    for zi in z:
        n = zi.size
        acc = np.zeros(n)
        running = 0.0
        for t in range(n - 1, -1, -1):  # discounted suffix sums
            running = zi[t] + gamma * running
            acc[t] = running
        advantages.append(acc / np.sqrt(n - np.arange(n)))  # sqrt(T_i − t + 1), 1-based t
        clips.append(eps0 * (1.0 + kappa * np.tanh(np.abs(zi))))
    return A2TGPOResult(z=tuple(z), advantages=tuple(advantages), clip=tuple(clips))


class A2TGPOOptions(MethodOptions):
    """Options of the registered ``a2tgpo`` method."""

    gamma: float = Field(1.0, ge=0, le=1, description="Discount of the accumulated normalised gains.")
    outcome: bool = Field(False, description="Add the group-centred team reward at each episode's last "
                                             "turn ([INFERRED] outcome term).")


A2TGPO_CARD = CardText(
    "A2TGPO: the information gain IG_t = p(y* | h_t) - p(y* | h_{t-1}), the change in the "
    "policy's own probability of the gold answer after message t, z-normalised per turn index "
    "across the group, then a discounted suffix sum divided by sqrt(turns left).",
    ("the policy's teacher-forced probability of the reference answer is a calibrated value of "
     "the transcript so far (a proxy for E[R | h_t], not a sampled one)",
     "messages with the same turn index across episodes are comparable",
     "every problem has a reference answer"),
    ("tests/credit/test_turn_baselines.py::test_a2tgpo_worked_example",
     "tests/credit/test_turn_baselines.py::test_a2tgpo_and_loto_methods_need_their_resources"),
    "no generation")


@register_credit("a2tgpo", A2TGPOOptions,
                 "A2TGPO: per-turn information gain in the gold answer, z-normalised per turn index",
                 requires=lambda options: frozenset({"answer_probability"}),
                 cost="one teacher-forced pass per message prefix", card=A2TGPO_CARD)
def a2tgpo_credit(batch: CreditBatch, options: A2TGPOOptions) -> list[np.ndarray]:
    """A2TGPO on episodes. Needs ``batch.resources.answer_probability``, a callable
    ``(episode, n_messages) -> p`` giving the policy's probability of the gold answer after the first
    ``n_messages`` messages (``n_messages = 0`` is the question alone). The per-turn clip ranges of
    :func:`a2tgpo_advantage` are not part of the registry's output (one advantage per message); a
    trainer that wants them calls the function directly.
    """
    prob = batch.resources.need("answer_probability", "method 'a2tgpo'")
    many = getattr(prob, "many", None)
    if many is not None:  # one batched pass over every (episode, prefix) of the group
        pairs = [(ep, n) for ep in batch.episodes for n in range(len(ep.messages) + 1)]
        flat = np.asarray(many(pairs), dtype=np.float64)
        if flat.shape != (len(pairs),):
            raise ValueError(f"answer_probability.many returned shape {flat.shape} for {len(pairs)} prefixes")
        p, start = [], 0
        for ep in batch.episodes:
            p.append(flat[start:start + len(ep.messages) + 1].tolist())
            start += len(ep.messages) + 1
    else:
        p = [[float(prob(ep, n)) for n in range(len(ep.messages) + 1)] for ep in batch.episodes]
    IG = [np.diff(np.asarray(x)) for x in p]
    outcome = None
    if options.outcome:
        R = np.array([ep.reward for ep in batch.episodes])
        outcome = R - R.mean()
    result = a2tgpo_advantage(IG, gamma=options.gamma, outcome=outcome)
    return [np.where(spoken_only_mask(ep), a, 0.0)
            for ep, a in zip(batch.episodes, result.advantages, strict=True)]


__all__ = ["A2TGPOOptions", "A2TGPOResult", "a2tgpo_advantage", "a2tgpo_credit", "information_gain"]

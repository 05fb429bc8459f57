"""Credit fidelity: how well a method's per-message advantages agree with the true causal advantage.

The true (oracle) advantage of message ``t`` of an episode is

    A*(u_t) = V(t + 1) - V(t),    V(t) = E[R | the first t messages]

the expected team reward after the message minus before it, the expectation taken over every
stochastic agent after the prefix and the verifier. ``V(T)`` is the episode's reward (the verifier
is deterministic) and ``V(0)`` the problem's value before anyone spoke, so per episode
``sum_t A*(u_t) = R - V(0)``. Skipped turns change nothing and get 0.

This module holds the arithmetic only: advantages from prefix values, the closed form of the
noisy-teammate setting, and the agreement statistics (Pearson, Spearman, sign agreement on clearly
non-zero true advantages, variance), with intervals from a cluster bootstrap over problems (the
episodes of one problem share its group normalisation, so they are not independent). Estimating
``V`` by re-execution is ``teamplay.training.play.oracle``'s job.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np


def advantages_from_values(values: Sequence[float]) -> np.ndarray:
    """``A*[t] = V[t + 1] - V[t]`` for prefix values ``V`` of shape [T + 1]; result shape [T].

    >>> advantages_from_values([0.25, 0.75, 1.0]).tolist()
    [0.5, 0.25]
    """
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 1 or v.size < 1:
        raise ValueError(f"prefix values must be a 1-D array of T + 1 >= 1 values, got shape {v.shape}")
    return np.diff(v)


def noisy_teammate_values(first_correct: float, p_correct: float, q: float, reward: float) -> np.ndarray:
    """Exact prefix values [V(0), V(1), V(2)] of the noisy-teammate episode.

    An answering agent speaks first (its answer is right with probability ``p_correct`` before it
    speaks, and ``first_correct`` in {0, 1} says whether it was); a teammate then replaces the
    team's answer with a wrong one with probability ``q``, independently of what came before, and
    otherwise keeps it. So ``V(0) = (1 - q) p``, ``V(1) = (1 - q) c`` and ``V(2) = R``.

    >>> noisy_teammate_values(1.0, 0.5, 0.25, 1.0).tolist()
    [0.375, 0.75, 1.0]
    """
    for name, value in (("first_correct", first_correct), ("p_correct", p_correct), ("q", q), ("reward", reward)):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"noisy teammate: {name} must lie in [0, 1], got {value!r}")
    return np.array([(1.0 - q) * p_correct, (1.0 - q) * first_correct, reward], dtype=np.float64)


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson correlation; NaN when either side is constant (no linear relation is defined)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.shape != y.shape:
        raise ValueError(f"correlation of arrays of shapes {x.shape} and {y.shape}")
    if x.size < 2:
        return float("nan")
    dx, dy = x - x.mean(), y - y.mean()
    denom = np.sqrt(np.dot(dx, dx) * np.dot(dy, dy))
    # a relative test: values equal up to rounding count as constant
    if denom <= 1e-12 * max(1.0, float(np.abs(x).max()) * float(np.abs(y).max())) * x.size:
        return float("nan")
    return float(np.clip(np.dot(dx, dy) / denom, -1.0, 1.0))


def ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 0..n-1 with ties given their average rank (as Spearman's correlation needs).

    >>> ranks(np.array([3.0, 1.0, 3.0, 2.0])).tolist()
    [2.5, 0.0, 2.5, 1.0]
    """
    x = np.asarray(x, dtype=np.float64)
    order = np.argsort(x, kind="mergesort")
    out = np.empty(x.size, dtype=np.float64)
    sorted_x = x[order]
    start = 0
    while start < x.size:
        end = start
        while end + 1 < x.size and sorted_x[end + 1] == sorted_x[start]:
            end += 1
        out[order[start:end + 1]] = (start + end) / 2.0
        start = end + 1
    return out


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rank correlation (Pearson of average ranks); NaN when either side is constant."""
    return pearson(ranks(x), ranks(y))


def sign_agreement(method: np.ndarray, oracle: np.ndarray, threshold: float) -> float:
    """Share of messages with ``|A*| > threshold`` whose method advantage has the same sign (a zero
    method advantage does not agree); NaN when no message passes the threshold."""
    method, oracle = np.asarray(method, dtype=np.float64), np.asarray(oracle, dtype=np.float64)
    clear = np.abs(oracle) > threshold
    if not clear.any():
        return float("nan")
    return float(np.mean(np.sign(method[clear]) == np.sign(oracle[clear])))


@dataclass(frozen=True)
class Agreement:
    """Agreement of a method's advantages with the oracle's, each with a 95% bootstrap interval
    (``(low, high)``; NaN where the statistic is undefined in too many resamples).

    Fields: pearson, spearman, sign (sign agreement on clear oracle advantages), variance (of the
    method's advantages), n (messages), clear (messages with ``|A*|`` above the threshold).
    """

    pearson: float
    pearson_ci: tuple[float, float]
    spearman: float
    spearman_ci: tuple[float, float]
    sign: float
    sign_ci: tuple[float, float]
    variance: float
    n: int
    clear: int

    def to_dict(self) -> dict:
        return asdict(self)


def agreement(method: Sequence[float], oracle: Sequence[float], clusters: Sequence[object],
              threshold: float = 0.1, resamples: int = 1000, seed: int = 0) -> Agreement:
    """Pearson, Spearman and sign agreement of ``method`` with ``oracle`` (both shape [n], one entry
    per spoken message), with 95% percentile intervals from a bootstrap that resamples whole
    ``clusters`` (one label per message: its problem), so the messages of one group stay together.
    """
    m = np.asarray(method, dtype=np.float64)
    o = np.asarray(oracle, dtype=np.float64)
    labels = np.asarray([str(c) for c in clusters])
    if not (m.shape == o.shape == labels.shape) or m.ndim != 1:
        raise ValueError(f"agreement: method {m.shape}, oracle {o.shape} and clusters {labels.shape} "
                         "must be 1-D of one length")
    unique = sorted(set(labels.tolist()))
    members = [np.flatnonzero(labels == c) for c in unique]
    rng = np.random.default_rng(seed)
    draws: dict[str, list[float]] = {"pearson": [], "spearman": [], "sign": []}
    for _ in range(resamples if len(unique) > 1 else 0):
        picked = np.concatenate([members[k] for k in rng.integers(0, len(unique), size=len(unique))])
        draws["pearson"].append(pearson(m[picked], o[picked]))
        draws["spearman"].append(spearman(m[picked], o[picked]))
        draws["sign"].append(sign_agreement(m[picked], o[picked], threshold))
    return Agreement(
        pearson=pearson(m, o), pearson_ci=_interval(draws["pearson"]),
        spearman=spearman(m, o), spearman_ci=_interval(draws["spearman"]),
        sign=sign_agreement(m, o, threshold), sign_ci=_interval(draws["sign"]),
        variance=float(np.var(m)) if m.size else float("nan"), n=int(m.size),
        clear=int(np.sum(np.abs(o) > threshold)))


def _interval(values: Sequence[float]) -> tuple[float, float]:
    """The 2.5% and 97.5% percentiles of the defined draws; NaN when over a tenth are undefined."""
    v = np.asarray(values, dtype=np.float64)
    ok = v[np.isfinite(v)]
    if v.size == 0 or ok.size < 0.9 * v.size:
        return (float("nan"), float("nan"))
    low, high = np.percentile(ok, [2.5, 97.5])
    return (float(low), float(high))

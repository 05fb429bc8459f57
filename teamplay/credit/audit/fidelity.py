"""Credit fidelity: how well a method's per-message advantages agree with the true causal advantage.

The true (oracle) advantage of message ``t`` of an episode is

    A*(u_t) = V(t + 1) - V(t),    V(t) = E[R | the first t messages]

the expected team reward after the message minus before it, the expectation taken over every
stochastic agent after the prefix and the verifier. ``V(T)`` is the episode's reward (the verifier
is deterministic) and ``V(0)`` the problem's value before anyone spoke, so per episode
``sum_t A*(u_t) = R - V(0)``. Skipped turns change nothing and get 0.

This module holds the arithmetic only: advantages from prefix values, the closed form of the
noisy-teammate setting, and the agreement statistics (Pearson, Spearman, sign agreement on clearly
non-zero true advantages, variance, and the within-group Pearson: both sides centred on their
problem's mean first, so a method is judged on how it orders the utterances of one group, which
is all a group-normalised update uses), with intervals from a cluster bootstrap over problems (the
episodes of one problem share its group normalisation, so they are not independent), and paired
differences between two methods on the same resamples. Estimating ``V`` by re-execution is
``teamplay.training.play.prefix_values``'s job.
"""

from __future__ import annotations

import math
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
    # sum / size is the mean numpy computes (the same pairwise sum, one division), without the
    # overhead of ndarray.mean: a cluster bootstrap calls this about a million times
    dx, dy = x - x.sum() / x.size, y - y.sum() / y.size
    denom = math.sqrt(float(np.dot(dx, dx)) * float(np.dot(dy, dy)))
    # a relative test: values equal up to rounding count as constant
    if denom <= 1e-12 * max(1.0, float(np.abs(x).max()) * float(np.abs(y).max())) * x.size:
        return float("nan")
    return min(1.0, max(-1.0, float(np.dot(dx, dy)) / denom))


def ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 0..n-1 with ties given their average rank (as Spearman's correlation needs).

    >>> ranks(np.array([3.0, 1.0, 3.0, 2.0])).tolist()
    [2.5, 0.0, 2.5, 1.0]
    """
    x = np.asarray(x, dtype=np.float64)
    if x.size == 0:
        return np.empty(0, dtype=np.float64)
    order = np.argsort(x, kind="mergesort")
    sorted_x = x[order]
    starts_run = np.empty(x.size, dtype=bool)  # where a run of equal values starts (NaN equals nothing)
    starts_run[0] = True
    np.not_equal(sorted_x[1:], sorted_x[:-1], out=starts_run[1:])
    starts = np.flatnonzero(starts_run)
    ends = np.append(starts[1:], x.size) - 1
    out = np.empty(x.size, dtype=np.float64)
    out[order] = ((starts + ends) / 2.0)[np.cumsum(starts_run) - 1]  # a tie's ranks all get their mean
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


def centred_within(x: np.ndarray, clusters: np.ndarray) -> np.ndarray:
    """``x`` minus the mean of its cluster, shape [n]. ``clusters``: labels, or non-negative integer
    codes (``cluster_codes``), each summed as its own cluster.

    >>> centred_within(np.array([1.0, 3.0, 5.0]), np.array(["a", "a", "b"])).tolist()
    [-1.0, 1.0, 0.0]
    """
    x = np.asarray(x, dtype=np.float64)
    clusters = np.asarray(clusters)
    if clusters.dtype.kind in "iu" and (clusters.size == 0 or clusters.min() >= 0):
        index = clusters  # already codes: bincount takes them as they are (empty codes have no mean)
    else:
        _, index = np.unique(clusters, return_inverse=True)
    sums, counts = np.bincount(index, weights=x), np.bincount(index)
    means = sums / np.maximum(counts, 1)  # a code no entry has: sum 0, mean 0 (never read)
    return x - means[index]


def cluster_codes(labels: np.ndarray) -> np.ndarray:
    """Each label's cluster as a code 0..k-1 (the sorted labels' order): what ``centred_within``
    takes directly, so a bootstrap resample does not sort its labels again."""
    return np.unique(np.asarray(labels), return_inverse=True)[1].reshape(-1)


def within_pearson(x: np.ndarray, y: np.ndarray, clusters: np.ndarray) -> float:
    """Pearson correlation of ``x`` and ``y`` after centring both within each cluster: how well
    ``x`` orders the entries of one cluster (a problem's group) as ``y`` does, with the spread
    between clusters taken out; NaN when either side is constant within every cluster."""
    return pearson(centred_within(x, clusters), centred_within(y, clusters))


def _resampled(labels: np.ndarray, resamples: int, seed: int):
    """The cluster bootstrap's index draws: ``resamples`` arrays of message indices, whole clusters
    drawn with replacement; the same ``(labels, resamples, seed)`` give the same draws, so two
    methods measured on the same messages are compared on the same resamples."""
    unique = sorted(set(labels.tolist()))
    members = [np.flatnonzero(labels == c) for c in unique]
    rng = np.random.default_rng(seed)
    for _ in range(resamples if len(unique) > 1 else 0):
        yield np.concatenate([members[k] for k in rng.integers(0, len(unique), size=len(unique))])


@dataclass(frozen=True)
class Agreement:
    """Agreement of a method's advantages with the oracle's, each with a 95% bootstrap interval
    (``(low, high)``; NaN where the statistic is undefined in too many resamples).

    Fields: pearson, spearman, sign (sign agreement on clear oracle advantages), variance (of the
    method's advantages), n (messages), clear (messages with ``|A*|`` above the threshold),
    within (Pearson after centring both sides within each problem, :func:`within_pearson`).
    """

    pearson: float
    pearson_ci: tuple[float, float]
    within: float
    within_ci: tuple[float, float]
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
    codes = cluster_codes(labels)
    draws: dict[str, list[float]] = {"pearson": [], "within": [], "spearman": [], "sign": []}
    for picked in _resampled(labels, resamples, seed):
        draws["pearson"].append(pearson(m[picked], o[picked]))
        # a cluster drawn twice counts as one cluster of twice the members: its mean is unchanged
        draws["within"].append(within_pearson(m[picked], o[picked], codes[picked]))
        draws["spearman"].append(spearman(m[picked], o[picked]))
        draws["sign"].append(sign_agreement(m[picked], o[picked], threshold))
    return Agreement(
        pearson=pearson(m, o), pearson_ci=_interval(draws["pearson"]),
        within=within_pearson(m, o, codes), within_ci=_interval(draws["within"]),
        spearman=spearman(m, o), spearman_ci=_interval(draws["spearman"]),
        sign=sign_agreement(m, o, threshold), sign_ci=_interval(draws["sign"]),
        variance=float(np.var(m)) if m.size else float("nan"), n=int(m.size),
        clear=int(np.sum(np.abs(o) > threshold)))


@dataclass(frozen=True)
class PairedDifference:
    """``statistic(method) - statistic(baseline)`` against the same oracle on the same messages,
    with the 95% percentile interval of the difference over the same cluster resamples (a shared
    draw cancels what the two methods share, so the interval is narrower than the two separate
    ones): ``pearson`` and ``within`` (within-group Pearson)."""

    pearson: float
    pearson_ci: tuple[float, float]
    within: float
    within_ci: tuple[float, float]

    def to_dict(self) -> dict:
        return asdict(self)


def paired_difference(method: Sequence[float], baseline: Sequence[float], oracle: Sequence[float],
                      clusters: Sequence[object], resamples: int = 1000, seed: int = 0) -> PairedDifference:
    """Pooled and within-group Pearson of ``method`` minus those of ``baseline`` (all shape [n],
    the same messages in the same order), on :func:`agreement`'s resamples for the same ``seed``."""
    m, b, o = (np.asarray(v, dtype=np.float64) for v in (method, baseline, oracle))
    labels = np.asarray([str(c) for c in clusters])
    if not (m.shape == b.shape == o.shape == labels.shape) or m.ndim != 1:
        raise ValueError(f"paired difference: method {m.shape}, baseline {b.shape}, oracle {o.shape} and "
                         f"clusters {labels.shape} must be 1-D of one length")
    codes = cluster_codes(labels)

    def both(idx: np.ndarray | slice) -> tuple[float, float]:
        lab = codes[idx]
        return (pearson(m[idx], o[idx]) - pearson(b[idx], o[idx]),
                within_pearson(m[idx], o[idx], lab) - within_pearson(b[idx], o[idx], lab))

    draws = [both(picked) for picked in _resampled(labels, resamples, seed)]
    pooled, within = both(slice(None))
    return PairedDifference(pooled, _interval([d[0] for d in draws]), within, _interval([d[1] for d in draws]))


def _interval(values: Sequence[float]) -> tuple[float, float]:
    """The 2.5% and 97.5% percentiles of the defined draws; NaN when over a tenth are undefined."""
    v = np.asarray(values, dtype=np.float64)
    ok = v[np.isfinite(v)]
    if v.size == 0 or ok.size < 0.9 * v.size:
        return (float("nan"), float("nan"))
    low, high = np.percentile(ok, [2.5, 97.5])
    return (float(low), float(high))

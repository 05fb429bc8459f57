"""How federated team training aggregates site updates: FedAvg, Fed-GRPO's three mechanisms, robust rules.

Everything here is a pure function of NumPy arrays and scalars, so each rule is tested by hand.
A client's update is the flat vector ``delta`` (float32, shape ``[N]``: every trainable LoRA entry
of the team, in the order of ``teamplay.federated.wire.param_layout``) of its local adapters minus
the global adapters it started the round from.

FedAvg (McMahan et al. 2017): ``global += sum_i w_i * delta_i`` with ``w_i = n_i / sum_j n_j``,
``n_i`` the number of training problems at site i.

Fed-GRPO (reward-signal-driven federated GRPO). Its paper's code and exact formulas are not public;
the rules below are our choices, each switchable on its own (``FedGrpoConfig``):

1. Signal-weighted aggregation (``signal_weights``). A site's signal ``s_i`` is the mean, over the
   GRPO groups it trained on this round, of the standard deviation of the rewards within the group
   (population std, so a group of all-equal rewards counts 0). ``w_i = max(s_i, floor) /
   sum_j max(s_j, floor)``. Why a floor on the signal itself rather than on the weight: a site with
   no signal this round keeps a small, known share instead of being excluded forever, and with all
   sites at zero signal the rule reduces to equal weights.
2. Global reward calibration (``calibration_weight``). The server keeps the global mean reward per
   problem type (types come from a metadata key such as ``level``; without types there is one
   type). A client multiplies the advantages of a problem's group by
   ``clip(1 + strength * (global_mean[type] - group_mean_reward), lo, hi)``: a problem this site
   solves less often than the federation solves its type gets a larger share of the gradient (its
   relative weak spot), one it solves more often a smaller one. Why per problem and not per site:
   the gap is then known at the moment the advantages are made, with no extra round trip.
3. Adaptive sparse upload with error feedback (``split_budget``, ``ErrorFeedback``). A global budget
   ``B`` (fraction of dense entries) gives ``B * N * K`` entries to the K sites of a round, split
   in proportion to the sites' floored signals of their last completed round (equal in round 1) by
   water filling: no site gets more than ``N``, the excess goes to the others in proportion. So
   ``B = 1`` gives every site exactly ``N`` entries: dense upload, bit for bit. A site sends the
   ``k`` entries of largest magnitude of ``delta + residual`` and keeps the rest as its next
   residual, so over rounds the sum of what was sent plus the residual equals the sum of deltas.

Robust aggregation (``AGGREGATORS``, ``federated.robust.aggregator``): how the round's valid deltas
become one update, each a function ``(deltas [K, N] float64, weights [K], options) -> [N]``:

    mean          ``sum_i w_i * delta_i`` (the rule above).
    median        coordinate-wise median, sites weighted equally (Flower's FedMedian rule).
    trimmed_mean  per coordinate, drop the ``floor(trim_fraction * K)`` largest and smallest values
                  and average the rest, sites weighted equally (Flower's FedTrimmedAvg ``trim_mean``).
    clipped_mean  every delta scaled to norm at most ``clip_factor x`` the median of the round's
                  norms, then the weighted mean: one site can move the global team at most that far.

One site sending ``-10 x`` its delta, or noise, moves ``mean`` arbitrarily far; the other three
bound its pull while fewer than half the sites misbehave (median, clipped_mean: the median norm is
an honest one) or at most the trimmed count per side (trimmed_mean). The price: median and
trimmed_mean drop the strategy's weights and part of the honest sites' information on non-IID
shards. ``benchmarks/federated_byzantine.py`` measures both.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np


def fedavg_weights(sizes: Sequence[float]) -> np.ndarray:
    """FedAvg weights ``n_i / sum n``; ``sizes`` must be positive.  [K] -> [K], sums to 1."""
    n = np.asarray(sizes, dtype=np.float64)
    if n.size == 0 or not np.all(np.isfinite(n)) or np.any(n <= 0):
        raise ValueError(f"fedavg_weights: sizes must be positive, got {list(sizes)}")
    return n / n.sum()


def signal_weights(signals: Sequence[float], floor: float) -> np.ndarray:
    """Fed-GRPO weights ``max(s_i, floor) / sum_j max(s_j, floor)``.  [K] -> [K], sums to 1.

    ``floor`` > 0 keeps every site in: with all signals 0 the weights are equal. A NaN or inf
    signal is a ValueError (``np.maximum(nan, floor)`` is NaN and would spread to every weight).
    """
    if floor <= 0:
        raise ValueError(f"signal_weights: floor must be > 0, got {floor}")
    raw = np.asarray(signals, dtype=np.float64)
    if not np.all(np.isfinite(raw)):
        raise ValueError(f"signal_weights: signals must be finite, got {list(signals)}")
    s = np.maximum(raw, floor)
    return s / s.sum()


@dataclass(frozen=True)
class AggregatorOptions:
    """Settings of the robust rules (``federated.robust``); each rule reads only its own.

    Fields:
        trim_fraction: trimmed_mean's share cut from each tail, in [0, 0.5).
        clip_factor: clipped_mean's bound on a delta's norm, as a multiple of the round's median norm.
    """

    trim_fraction: float = 0.2
    clip_factor: float = 1.0


def weighted_mean(deltas: np.ndarray, weights: np.ndarray, options: AggregatorOptions) -> np.ndarray:
    """``sum_i w_i * delta_i``, summed in site order in float64.  [K, N], [K] -> [N]."""
    total = np.zeros(deltas.shape[1], dtype=np.float64)
    for w, d in zip(weights, deltas, strict=True):
        total += float(w) * d
    return total


def coordinate_median(deltas: np.ndarray, weights: np.ndarray, options: AggregatorOptions) -> np.ndarray:
    """Per entry, the median over sites (an even K averages the middle two); weights unused.
    [K, N] -> [N]. Flower's FedMedian computes the same ``np.median(axis=0)`` over its replies."""
    return np.median(deltas, axis=0)


def trimmed_mean(deltas: np.ndarray, weights: np.ndarray, options: AggregatorOptions) -> np.ndarray:
    """Per entry, the mean of the values left after cutting ``floor(trim_fraction * K)`` from each
    end (none cut when that is 0); weights unused.  [K, N] -> [N]. Flower's own ``trim_mean``."""
    from flwr.serverapp.strategy.fedtrimmedavg import trim_mean

    return np.asarray(trim_mean(deltas, options.trim_fraction), dtype=np.float64)


def clipped_mean(deltas: np.ndarray, weights: np.ndarray, options: AggregatorOptions) -> np.ndarray:
    """The weighted mean of ``clip_norms(deltas, clip_factor * median norm)``.  [K, N], [K] -> [N]."""
    bound = options.clip_factor * float(np.median(update_norms(deltas)))
    return weighted_mean(clip_norms(deltas, bound), weights, options)


def update_norms(deltas: np.ndarray) -> np.ndarray:
    """L2 norm of each site's delta, float64.  [K, N] -> [K]."""
    return np.sqrt(np.einsum("kn,kn->k", deltas, deltas, dtype=np.float64))


def clip_norms(deltas: np.ndarray, bound: float) -> np.ndarray:
    """Each row scaled by ``min(1, bound / ||row||)``: norms at most ``bound``, directions kept;
    a zero row stays zero, and ``bound = 0`` zeroes every row.  [K, N] -> [K, N]."""
    norms = update_norms(deltas)
    scale = np.ones_like(norms)
    over = norms > bound
    scale[over] = bound / norms[over]
    return deltas * scale[:, None]


@dataclass(frozen=True)
class Aggregator:
    """A rule ``(deltas [K, N] float64, weights [K], options) -> update [N]``; ``weighted``: whether
    it reads the weights (FedAvg's or Fed-GRPO's), else every site counts the same."""

    rule: Callable[[np.ndarray, np.ndarray, AggregatorOptions], np.ndarray]
    weighted: bool


#: the rules of ``federated.robust.aggregator`` (see the module doc)
AGGREGATORS: dict[str, Aggregator] = {
    "mean": Aggregator(weighted_mean, weighted=True),
    "median": Aggregator(coordinate_median, weighted=False),
    "trimmed_mean": Aggregator(trimmed_mean, weighted=False),
    "clipped_mean": Aggregator(clipped_mean, weighted=True),
}


def aggregate(global_vec: np.ndarray, deltas: Sequence[np.ndarray], weights: np.ndarray, rule: str = "mean",
              options: AggregatorOptions = AggregatorOptions()) -> np.ndarray:
    """``global + AGGREGATORS[rule](deltas, weights)`` in float64, returned as float32.
    [N], K x [N], [K] -> [N].

    Raises ValueError when there is no delta, when a delta's shape is not ``global_vec``'s (NumPy
    would broadcast a ``[1]`` delta over every entry), or when a delta or weight is not finite.
    """
    if not deltas:
        raise ValueError("aggregate: no delta to aggregate")
    if len(deltas) != len(weights):
        raise ValueError(f"{len(deltas)} deltas but {len(weights)} weights")
    for i, d in enumerate(deltas):
        if d.shape != global_vec.shape:
            raise ValueError(f"aggregate: delta {i} has shape {d.shape}, the global vector {global_vec.shape}")
    stacked = np.stack([d.astype(np.float64) for d in deltas])  # [K, N]
    w = np.asarray(weights, dtype=np.float64)
    if not (np.all(np.isfinite(stacked)) and np.all(np.isfinite(w))):
        raise ValueError("aggregate: deltas and weights must be finite")
    update = AGGREGATORS[rule].rule(stacked, w, options)  # [N]
    return (global_vec.astype(np.float64) + update).astype(np.float32)


def split_budget(budget: float, n_entries: int, signals: Sequence[float], floor: float) -> list[int]:
    """Entries each site may upload: ``B * N * K`` split by floored signal, capped at ``N``.

    Water filling: sites whose proportional share exceeds ``N`` get ``N``; what they could not use
    is shared among the rest in proportion to their signals, until no share exceeds ``N``. Counts
    are floored to integers, and every site gets at least 1 entry. ``budget = 1`` returns
    ``[N] * K`` exactly.
    """
    if not 0 < budget <= 1:
        raise ValueError(f"split_budget: budget must be in (0, 1], got {budget}")
    w = signal_weights(signals, floor)
    k = len(w)
    total = budget * n_entries * k
    share = np.zeros(k)
    open_ = np.ones(k, dtype=bool)
    while open_.any():
        left = total - share[~open_].sum()
        proposal = left * w / w[open_].sum()
        over = open_ & (proposal >= n_entries)
        if not over.any():
            share[open_] = proposal[open_]
            break
        share[over] = n_entries
        open_ &= ~over
    # 1e-9 guards against 0.1 * 30 = 2.9999999999999996 losing an entry to the floor
    return [int(max(1, min(n_entries, np.floor(x + 1e-9)))) for x in share]


@dataclass(frozen=True)
class SparseUpdate:
    """What one site uploads: ``indices`` (int32, sorted, [k]) and their ``values`` (float32, [k])
    of a flat vector of length ``size``; or the whole vector when ``dense`` (indices empty)."""

    size: int
    indices: np.ndarray
    values: np.ndarray
    dense: bool

    def to_dense(self) -> np.ndarray:
        """The decoded vector, [size] float32 (zeros outside ``indices``)."""
        if self.dense:
            return self.values.astype(np.float32, copy=True)
        out = np.zeros(self.size, dtype=np.float32)
        out[self.indices] = self.values
        return out

    @property
    def nbytes(self) -> int:
        """Payload bytes: values (4 each) plus indices (4 each) when sparse."""
        return int(self.values.nbytes + self.indices.nbytes)


def top_k(vec: np.ndarray, k: int) -> SparseUpdate:
    """The ``k`` entries of largest magnitude of ``vec`` (ties: the lower index first).

    Sent dense when ``k >= N/2``: 8 bytes per sparse entry cost at least the 4 per dense entry then,
    and the decoded vector is the same.
    """
    n = vec.size
    k = max(0, min(int(k), n))
    if 2 * k >= n:
        kept = vec.astype(np.float32, copy=True)
        if k < n:  # zero all but the top k, same selection rule as below
            drop = np.ones(n, dtype=bool)
            drop[_top_indices(vec, k)] = False
            kept[drop] = 0.0
        return SparseUpdate(n, np.zeros(0, dtype=np.int32), kept, dense=True)
    idx = _top_indices(vec, k)
    return SparseUpdate(n, idx, vec[idx].astype(np.float32), dense=False)


def _top_indices(vec: np.ndarray, k: int) -> np.ndarray:
    # stable sort on -|v|: equal magnitudes keep index order, so the choice is deterministic
    order = np.argsort(-np.abs(vec), kind="stable")[:k]
    return np.sort(order).astype(np.int32)


class ErrorFeedback:
    """A site's residual of what it has not sent yet (float32, [N]).

    ``compress(delta, k)`` sends the top k of ``delta + residual`` and keeps the rest, so for any
    sequence of rounds ``sum(sent) + residual == sum(delta)`` (up to float32 rounding of the adds).
    A round whose upload the server did not aggregate is undone at the site, residual included
    (``teamplay.federated.client``), so the sum runs over the rounds the server used.
    """

    def __init__(self, size: int, residual: np.ndarray | None = None) -> None:
        self.residual = np.zeros(size, dtype=np.float32) if residual is None else residual.astype(np.float32)
        if self.residual.shape != (size,):
            raise ValueError(f"residual has shape {self.residual.shape}, expected ({size},)")

    def compress(self, delta: np.ndarray, k: int) -> SparseUpdate:
        corrected = delta.astype(np.float32) + self.residual
        update = top_k(corrected, k)
        self.residual = corrected - update.to_dense()
        return update


def calibration_weight(global_mean: float, group_mean: float, strength: float, lo: float, hi: float) -> float:
    """Fed-GRPO calibration: ``clip(1 + strength * (global_mean - group_mean), lo, hi)``."""
    return float(np.clip(1.0 + strength * (global_mean - group_mean), lo, hi))


def global_type_means(reports: Sequence[Mapping[str, tuple[float, int]]],
                      previous: Mapping[str, float]) -> dict[str, float]:
    """The server's calibration table: per type, total reward / total count over the sites that
    reported this round (``{type: (reward_sum, count)}`` each); types nobody reported keep their
    ``previous`` mean. Keys sorted.

    The totals are exact sums (``math.fsum``), so the table does not depend on the order of the
    reports: replies arrive in whatever order the sites finish, and a float sum of three or more
    terms in another order can differ in its last bit, which reaches every site's advantages.
    """
    sums: dict[str, list[float]] = {}
    counts: dict[str, int] = {}
    for report in reports:
        for t, (s, c) in report.items():
            sums.setdefault(t, []).append(s)
            counts[t] = counts.get(t, 0) + c
    table = dict(previous)
    table.update({t: math.fsum(sums[t]) / counts[t] for t in sums if counts[t] > 0})
    return dict(sorted(table.items()))

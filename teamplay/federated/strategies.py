"""Aggregation strategies of federated team training: FedAvg and Fed-GRPO's three mechanisms.

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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np


def fedavg_weights(sizes: Sequence[float]) -> np.ndarray:
    """FedAvg weights ``n_i / sum n``; ``sizes`` must be positive.  [K] -> [K], sums to 1."""
    n = np.asarray(sizes, dtype=np.float64)
    if n.size == 0 or np.any(n <= 0):
        raise ValueError(f"fedavg_weights: sizes must be positive, got {list(sizes)}")
    return n / n.sum()


def signal_weights(signals: Sequence[float], floor: float) -> np.ndarray:
    """Fed-GRPO weights ``max(s_i, floor) / sum_j max(s_j, floor)``.  [K] -> [K], sums to 1.

    ``floor`` > 0 keeps every site in: with all signals 0 the weights are equal.
    """
    if floor <= 0:
        raise ValueError(f"signal_weights: floor must be > 0, got {floor}")
    s = np.maximum(np.asarray(signals, dtype=np.float64), floor)
    return s / s.sum()


def aggregate(global_vec: np.ndarray, deltas: Sequence[np.ndarray], weights: np.ndarray) -> np.ndarray:
    """``global + sum_i w_i * delta_i`` in float64, returned as float32.  [N], K x [N], [K] -> [N]."""
    if len(deltas) != len(weights):
        raise ValueError(f"{len(deltas)} deltas but {len(weights)} weights")
    total = np.zeros(global_vec.shape, dtype=np.float64)
    for w, d in zip(weights, deltas, strict=True):
        total += float(w) * d.astype(np.float64)
    return (global_vec.astype(np.float64) + total).astype(np.float32)


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
    ``restore(update)`` puts an upload the server did not aggregate (the site timed out) back into
    the residual, so nothing is lost either.
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

    def restore(self, update: SparseUpdate) -> None:
        self.residual = self.residual + update.to_dense()


def calibration_weight(global_mean: float, group_mean: float, strength: float, lo: float, hi: float) -> float:
    """Fed-GRPO calibration: ``clip(1 + strength * (global_mean - group_mean), lo, hi)``."""
    return float(np.clip(1.0 + strength * (global_mean - group_mean), lo, hi))


def global_type_means(reports: Sequence[Mapping[str, tuple[float, int]]],
                      previous: Mapping[str, float]) -> dict[str, float]:
    """The server's calibration table: per type, total reward / total count over the sites that
    reported this round (``{type: (reward_sum, count)}`` each); types nobody reported keep their
    ``previous`` mean."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for report in reports:
        for t, (s, c) in report.items():
            sums[t] = sums.get(t, 0.0) + s
            counts[t] = counts.get(t, 0) + c
    table = dict(previous)
    table.update({t: sums[t] / counts[t] for t in sums if counts[t] > 0})
    return table

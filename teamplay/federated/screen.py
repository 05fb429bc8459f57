"""The server's checks of a round's site results, before any of them touches the global adapters.

A reply (one that carries no error: a site that raised is a failure, not a result) is refused, left
out of the round with one ``warning:`` line naming the site and the reason, when:

1. it comes from a node the round did not ask, or answers another round: its message group or its
   ``round`` metric is not this round;
2. it holds anything but the update and scalar metrics (``wire.check_reply``), or lacks one of
   ``REQUIRED_METRICS``, or one of those that count something is not an integer;
3. its site index is not one of the federation's, or another reply of the round claims the same
   site (both are refused: which one is honest cannot be told);
4. its update has other arrays or shapes than the layout's (dense ``[N]``; sparse: as many
   indices, strictly increasing and in ``[0, N)``, as values);
5. a value of the update or of a metric is NaN or inf, or the signal is negative;
6. its claimed example count (``shard_size``) is not positive or exceeds the shard that site was
   given;
7. its update's L2 norm exceeds ``max_norm_ratio`` x the median norm of the round's updates that
   passed 1-6. Why the median: one huge update cannot raise it, while it moves the mean. The check
   needs a positive median (with every update zero there is no scale to compare with) and at
   least 3 updates: with 2 the median is their mean, which a single site controls.

``screen`` returns the accepted results sorted by site and the refusals sorted by site, so what the
round aggregates and logs does not depend on the order in which replies arrived.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from teamplay.errors import TeamplayError, TeamplayWarning
from teamplay.federated.aggregation import SparseUpdate
from teamplay.federated.wire import check_reply, decode_update, record_bytes

#: metrics every site result must carry (``teamplay.federated.client.train_site``)
REQUIRED_METRICS = ("site", "round", "shard_size", "signal", "reward_mean", "groups", "site_step")
#: of those, the ones that count something and must be integers
_INTEGER_METRICS = ("site", "round", "shard_size", "groups", "site_step")


class SiteRefusedWarning(TeamplayWarning):
    """A site's result failed the server's checks and was left out of the round; the message names
    the round, the site (or node) and the reason."""


class TooFewSitesError(TeamplayError):
    """Fewer than ``federated.min_sites`` results were left after failures and refusals."""


@dataclass(frozen=True)
class RoundSpec:
    """What the server asked in one round, against which replies are checked.

    Fields:
        round: the round (1-based).
        nodes: the Flower nodes sent this round's ``train`` message.
        shard_sizes: problems in each site's shard, by site index (``len`` = K).
        size: N, entries of the flat adapter vector.
        max_norm_ratio: check 7's factor; ``None`` turns the check off.
    """

    round: int
    nodes: tuple[int, ...]
    shard_sizes: tuple[int, ...]
    size: int
    max_norm_ratio: float | None


@dataclass(frozen=True)
class SiteResult:
    """One accepted reply: the site's update (``[N]`` once dense), its metrics, and the bytes its
    update took on the wire."""

    site: int
    node: int
    update: SparseUpdate
    metrics: Mapping[str, float]
    bytes: int

    @property
    def delta(self) -> np.ndarray:
        """The update as a dense float32 vector, [N]."""
        return self.update.to_dense()


@dataclass(frozen=True)
class Refusal:
    """A reply left out of the round: who sent it (``site`` None when it could not be read) and why."""

    node: int
    site: int | None
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "site": self.site, "reason": self.reason}

    def message(self, rnd: int) -> str:
        who = f"site {self.site} (node {self.node})" if self.site is not None else f"node {self.node} (site unknown)"
        return f"round {rnd}: {who} left out: {self.reason}"


class _Refused(Exception):
    def __init__(self, reason: str, site: int | None = None) -> None:
        super().__init__(reason)
        self.reason, self.site = reason, site


def screen(replies: Iterable[Any], spec: RoundSpec) -> tuple[list[SiteResult], list[Refusal]]:
    """Checks 1-7 of the module doc on this round's error-free replies (Flower ``Message``s).

    Returns (accepted results sorted by site, refusals sorted by site then reason).
    """
    results: list[SiteResult] = []
    refused: list[Refusal] = []
    for reply in replies:
        node = int(reply.metadata.src_node_id)
        try:
            results.append(_check_reply(reply, node, spec))
        except _Refused as exc:
            refused.append(Refusal(node, exc.site, exc.reason))
    results, refused = _refuse_duplicates(results, refused)
    results, refused = _refuse_outlier_norms(results, refused, spec.max_norm_ratio)
    refused.sort(key=lambda r: (r.site is None, r.site or 0, r.reason, r.node))
    return sorted(results, key=lambda r: r.site), refused


def _check_reply(reply: Any, node: int, spec: RoundSpec) -> SiteResult:
    """Checks 1-6 on one reply; raises ``_Refused`` naming the site the reply claims, if readable."""
    content = reply.content
    site = _claimed_site(content, len(spec.shard_sizes))
    try:
        if node not in spec.nodes:
            raise _Refused(f"node {node} was not asked in round {spec.round}")
        if reply.metadata.group_id != str(spec.round):
            raise _Refused(f"answers the message of round {reply.metadata.group_id!r}, not round {spec.round}")
        try:
            check_reply(content)
        except ValueError as exc:
            raise _Refused(f"malformed reply: {exc}") from None
        metrics = dict(content["metrics"])
        if site is None:
            raise _Refused(f"metric 'site' is {metrics.get('site')!r}, not one of the "
                           f"{len(spec.shard_sizes)} site indices")
        _check_metrics(metrics, spec)
        update = _decode(content["update"], spec.size)
    except _Refused as exc:
        raise _Refused(exc.reason, site) from None
    return SiteResult(site, node, update, metrics, record_bytes(content["update"]))


def _claimed_site(content: Any, clients: int) -> int | None:
    """The site index a reply's metrics claim, or None when there is no valid one to read."""
    try:
        value = content["metrics"]["site"]
    except Exception:  # no metrics record, or no site in it: a malformed reply, refused below
        return None
    if not _is_integer(value) or not 0 <= int(value) < clients:
        return None
    return int(value)


def _check_metrics(metrics: Mapping[str, Any], spec: RoundSpec) -> None:
    missing = [name for name in REQUIRED_METRICS if name not in metrics]
    if missing:
        raise _Refused(f"metrics {missing} missing")
    bad = sorted(name for name, value in metrics.items() if not math.isfinite(value))
    if bad:
        raise _Refused(f"non-finite metrics {bad}")
    for name in _INTEGER_METRICS:
        if not _is_integer(metrics[name]):
            raise _Refused(f"metric {name!r} is {metrics[name]!r}, not an integer")
    if metrics["round"] != spec.round:
        raise _Refused(f"reports round {int(metrics['round'])}, was asked for round {spec.round}")
    if metrics["signal"] < 0:
        raise _Refused(f"signal {metrics['signal']!r} < 0 (a standard deviation)")
    shard = spec.shard_sizes[int(metrics["site"])]
    if not 0 < metrics["shard_size"] <= shard:
        raise _Refused(f"claims {int(metrics['shard_size'])} examples, its shard holds {shard}")
    counts = [name for name in metrics if name.startswith("type_count/")
              and not (_is_integer(metrics[name]) and metrics[name] >= 0)]
    if counts:
        raise _Refused(f"metrics {sorted(counts)} are not counts")


def _decode(record: Any, size: int) -> SparseUpdate:
    try:
        update = decode_update(record, size)
    except Exception as exc:  # whatever a malformed record raises, the server goes on without it
        raise _Refused(f"update: {exc}") from None
    if update.indices.size > 1 and np.any(np.diff(update.indices.astype(np.int64)) <= 0):
        raise _Refused("update: sparse indices are not strictly increasing (repeated or unsorted)")
    if not np.all(np.isfinite(update.values)):
        bad = int(np.count_nonzero(~np.isfinite(update.values)))
        raise _Refused(f"update: {bad} of {update.values.size} values are NaN or inf")
    return update


def _refuse_duplicates(results: list[SiteResult], refused: list[Refusal]) -> tuple[list[SiteResult], list[Refusal]]:
    """Check 3's second half: a site claimed by two or more replies is refused in all of them."""
    claims: dict[int, list[SiteResult]] = {}
    for r in results:
        claims.setdefault(r.site, []).append(r)
    kept = [r for r in results if len(claims[r.site]) == 1]
    for site, rs in claims.items():
        if len(rs) > 1:
            nodes = sorted(r.node for r in rs)
            refused += [Refusal(r.node, site, f"{len(rs)} replies claim site {site} (nodes {nodes})") for r in rs]
    return kept, refused


def outlying_norms(norms: np.ndarray, ratio: float | None) -> np.ndarray:
    """Check 7 on the round's update norms [K]: True where ``norm > ratio x median(norms)``; all
    False with ``ratio`` None, fewer than 3 norms, or a median of 0.  [K] -> [K] bool."""
    norms = np.asarray(norms, dtype=np.float64)
    median = float(np.median(norms)) if norms.size else 0.0
    if ratio is None or norms.size < 3 or median <= 0:
        return np.zeros(norms.shape, dtype=bool)
    return norms > ratio * median


def _refuse_outlier_norms(results: list[SiteResult], refused: list[Refusal],
                          ratio: float | None) -> tuple[list[SiteResult], list[Refusal]]:
    """Check 7 on the results that passed 1-6."""
    norms = np.array([float(np.linalg.norm(r.delta.astype(np.float64))) for r in results])
    out = outlying_norms(norms, ratio)
    kept = [r for r, o in zip(results, out, strict=True) if not o]
    for r, norm, o in zip(results, norms, out, strict=True):
        if o:
            median = float(np.median(norms))
            reason = (f"update norm {norm:.4g} is {norm / median:.1f}x the round's median {median:.4g} "
                      f"(federated.robust.max_norm_ratio = {ratio:g})")
            refused.append(Refusal(r.node, r.site, reason))
    return kept, refused


def _is_integer(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) \
        and float(value).is_integer()

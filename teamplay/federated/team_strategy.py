"""The round policy of a federated team run, as a Flower ``Strategy`` (Flower's Message API).

``TeamStrategy`` decides what each site is asked and what the round's replies make of the global
adapters; ``FederatedServer`` drives it one round at a time and keeps what ``Strategy.start`` does
not do (resume, a checkpoint per round, SIGTERM/SIGINT while it waits, the round log):

    configure_train   one ``train`` message per site (Flower node): the global vector, and in its
                      config the round, the round each site restores its state of (the last one
                      the server aggregated it in), each site's upload budget in entries
                      (``split_budget`` of the last signals; dense under FedAvg or with sparse
                      upload off) and the calibration table, beside the run's own config;
    aggregate_train   the replies that carry an error (the site raised) or never came (timeout)
                      are failures, those that fail ``teamplay.federated.screen``'s checks are
                      refused (one ``warning:`` line each); fewer than ``federated.min_sites``
                      left is a ``TooFewSitesError``; the rest are weighted (FedAvg by shard
                      size, Fed-GRPO by signal, equal under an unweighted aggregator) and
                      ``global + federated.robust.aggregator(deltas)`` is the new global vector;
                      the calibration table, signals and restore rounds move on;
    configure_evaluate, aggregate_evaluate   nothing: sites hold training shards only, and the
                      server evaluates the global team on the held-out set itself.

Everything it computes from replies is ordered by site, never by arrival (``screen`` sorts them;
the calibration sums are exact), so the order in which sites answer does not reach the numbers.
Its state is ``state`` (``ServerState``), all a resumed strategy needs; the server checkpoints it.
"""

from __future__ import annotations

import json
import logging
import time
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from teamplay.config import FederatedSection
from teamplay.errors import ConfigError
from teamplay.federated import aggregation
from teamplay.federated.screen import Refusal, RoundSpec, SiteRefusedWarning, SiteResult, TooFewSitesError, screen
from teamplay.federated.wire import encode_update, record_bytes, type_stats

logger = logging.getLogger("teamplay.federated")


@dataclass
class ServerState:
    """What a resumed strategy needs besides the global adapters (``server_state.json``).

    Fields:
        round: rounds completed.
        calibration: global mean reward per problem type.
        signals: each site's signal in the last round it completed (by site index, as text).
        aggregated: sites aggregated in the last completed round.
        restore: each site's last aggregated round (by site index, as text; absent: none yet),
            the state it starts its next round from.
    """

    round: int = 0
    calibration: dict[str, float] = field(default_factory=dict)
    signals: dict[str, float] = field(default_factory=dict)
    aggregated: list[int] = field(default_factory=list)
    restore: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class RoundReport:
    """What ``aggregate_train`` made of one round's replies, for the round's log line.

    Fields:
        round: the round.
        asked: the nodes sent its ``train`` message.
        results: the accepted site results, sorted by site.
        weights: their aggregation weights, [len(results)], summing to 1.
        failed: ``{"node", "error"}`` of each error reply or missing one, sorted by error then node.
        refused: the replies ``screen`` refused, sorted by site.
    """

    round: int
    asked: tuple[int, ...]
    results: tuple[SiteResult, ...]
    weights: tuple[float, ...]
    failed: tuple[dict[str, Any], ...]
    refused: tuple[Refusal, ...]

    def counts(self) -> dict[str, int]:
        """Sites asked, aggregated, failed and refused."""
        return {"asked": len(self.asked), "aggregated": len(self.results), "failed": len(self.failed),
                "refused": len(self.refused)}


class TeamStrategy(Strategy):
    """FedAvg or Fed-GRPO (``fed.strategy``, of the run's ``federated`` section) with robust
    aggregation, over the flat adapter vector of ``size`` entries (``teamplay.federated.wire``) and
    sites whose shards hold ``shard_sizes`` problems (by site index). ``state`` continues a resumed run."""

    def __init__(self, fed: FederatedSection, size: int, shard_sizes: tuple[int, ...],
                 state: ServerState | None = None) -> None:
        self.fed, self.size, self.shard_sizes = fed, size, shard_sizes
        self.state = state if state is not None else ServerState()
        #: the last round's report (``aggregate_train``), None before the first
        self.report: RoundReport | None = None
        self._nodes: tuple[int, ...] = ()  # the sites' nodes, found at the first round and asked every round
        self._global = np.zeros(0, np.float32)  # this round's global vector [N]

    # --------------------------------------------------------------------------- training
    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        """One ``train`` message per site: ``arrays`` ({"vector": the global vector [N]}) and
        ``config`` (the run's own, e.g. ``run_config``) with this round's orders added.

        The sites' nodes are the first ``federated.clients`` connected ones (sorted), waited for
        at the first round and kept for the run: a site that drops out later is a failure of the
        rounds it misses, not a reason to stop and wait."""
        if not self._nodes:
            self._nodes = tuple(_wait_for_nodes(grid, self.fed.clients, timeout=max(60.0, self.fed.round_timeout)))
        self._global = arrays["vector"].numpy()
        orders = ConfigRecord({**config, "round": server_round, "restore": json.dumps(self.state.restore),
                               "entries": json.dumps(self.entries()),
                               "calibration": json.dumps(self.state.calibration)})
        content = RecordDict({"global": arrays, "config": orders})
        return [Message(content, dst_node_id=node, message_type="train", group_id=str(server_round))
                for node in self._nodes]

    def aggregate_train(self, server_round: int,
                        replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """The new global vector ({"vector": float32 [N]}) from the replies to this round's
        messages (those that came in time), and the round's counts (asked, aggregated, failed,
        refused) and bytes uploaded; ``report`` holds the rest for the log. Raises
        ``TooFewSitesError`` (nothing of the round applied) when fewer than ``min_sites``
        results are left."""
        fed, replies = self.fed, list(replies)
        failed = _failures(replies, self._nodes, fed.round_timeout)
        for failure in failed:
            logger.warning("round %d: node %s left out: %s", server_round, failure["node"], failure["error"])
        spec = RoundSpec(server_round, self._nodes, self.shard_sizes, self.size, fed.robust.max_norm_ratio)
        results, refused = screen([reply for reply in replies if not reply.has_error()], spec)
        for refusal in refused:
            warnings.warn(SiteRefusedWarning(refusal.message(server_round)), stacklevel=2)
        if len(results) < fed.min_sites:
            raise TooFewSitesError(_too_few(server_round, len(results), fed.min_sites, failed, refused))

        weights = self.weights(results)
        options = aggregation.AggregatorOptions(fed.robust.trim_fraction, fed.robust.clip_factor)
        new = aggregation.aggregate(self._global, [r.delta for r in results], weights, fed.robust.aggregator, options)
        self.state = ServerState(  # results are sorted by site
            round=server_round,
            calibration=aggregation.global_type_means([type_stats(r.metrics) for r in results],
                                                     self.state.calibration),
            signals={**self.state.signals, **{str(r.site): float(r.metrics["signal"]) for r in results}},
            aggregated=[r.site for r in results],
            restore={**self.state.restore, **{str(r.site): server_round for r in results}})
        self.report = RoundReport(server_round, self._nodes, tuple(results), tuple(float(w) for w in weights),
                                  tuple(failed), tuple(refused))
        counts = {**self.report.counts(), "bytes_total": sum(r.bytes for r in results)}
        return ArrayRecord({"vector": Array(new)}), MetricRecord(counts)

    def entries(self) -> dict[str, int]:
        """Entries each site may upload this round (site index as text -> k)."""
        fed = self.fed
        n, k = self.size, fed.clients
        if fed.strategy != "fedgrpo" or not fed.fedgrpo.sparse:
            return {str(s): n for s in range(k)}
        # sites without a past signal (round 1) get the mean of the known ones, or all equal
        known = [self.state.signals[str(s)] for s in range(k) if str(s) in self.state.signals]
        fill = float(np.mean(known)) if known else 1.0
        signals = [self.state.signals.get(str(s), fill) for s in range(k)]
        split = aggregation.split_budget(fed.fedgrpo.budget, n, signals, fed.fedgrpo.weight_floor)
        return {str(s): split[s] for s in range(k)}

    def weights(self, results: list[SiteResult]) -> np.ndarray:
        """Each site's share [K]: FedAvg's or Fed-GRPO's, or equal under an unweighted aggregator."""
        fed = self.fed
        if not aggregation.AGGREGATORS[fed.robust.aggregator].weighted:
            return np.full(len(results), 1.0 / len(results))
        if fed.strategy == "fedgrpo" and fed.fedgrpo.signal_weighting:
            return aggregation.signal_weights([r.metrics["signal"] for r in results], fed.fedgrpo.weight_floor)
        return aggregation.fedavg_weights([r.metrics["shard_size"] for r in results])

    # ------------------------------------------------------------------------- evaluation
    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        """No site evaluates: a site holds training problems only (the server evaluates)."""
        return []

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        """Nothing to aggregate (``configure_evaluate`` sends no message)."""
        return None

    def summary(self) -> None:
        """Log the policy's settings (Flower's ``Strategy.start`` calls it first)."""
        fed = self.fed
        logger.info("TeamStrategy: %s over %d sites, %d rounds of %d local steps; aggregator %s; "
                    "min_sites %d; round_timeout %g s", fed.strategy, fed.clients, fed.rounds, fed.local_steps,
                    fed.robust.aggregator, fed.min_sites, fed.round_timeout)

    # ---------------------------------------------------------------------------- the log
    def log_fields(self) -> dict[str, Any]:
        """The last round's line of ``federated.jsonl`` (the server adds its held-out evaluation and
        seconds): per site its node, bytes, entries, signal, reward, groups, shard, step and weight;
        failures, refusals, counts, the aggregator, bytes and compression, the calibration table."""
        report = self.report
        assert report is not None, "log_fields before the first aggregate_train"
        sites = {str(r.site): _site_record(r, w) for r, w in zip(report.results, report.weights, strict=True)}
        dense = aggregation.SparseUpdate(self.size, np.zeros(0, np.int32), np.zeros(self.size, np.float32), dense=True)
        dense_bytes = record_bytes(encode_update(dense))  # what a dense upload serialises to
        total = sum(site["bytes"] for site in sites.values())
        return {
            "round": report.round, "sites": sites, "failed": list(report.failed),
            "refused": [r.to_dict() for r in report.refused],
            "counts": report.counts(),
            "aggregator": self.fed.robust.aggregator,
            "bytes_total": total, "dense_bytes_per_site": dense_bytes,
            "compression": (dense_bytes * len(sites) / total) if total else None,
            "calibration": self.state.calibration,
        }


def _wait_for_nodes(grid, count: int, timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while True:
        nodes = sorted(grid.get_node_ids())
        if len(nodes) >= count:
            return nodes[:count]
        if time.monotonic() > deadline:
            raise ConfigError(f"federated.clients: {count} sites expected, {len(nodes)} connected within "
                              f"{timeout:g} s")
        time.sleep(0.2)


def _failures(replies: list, nodes: tuple[int, ...], timeout: float) -> list[dict[str, Any]]:
    """Nodes whose reply carries an error (the site raised) or that sent none in time, sorted by
    error then node (not by arrival)."""
    failed = [{"node": r.metadata.src_node_id, "error": _short(r.error.reason)} for r in replies if r.has_error()]
    answered = {r.metadata.src_node_id for r in replies}
    failed += [{"node": node, "error": f"no reply within {timeout:g} s"} for node in nodes if node not in answered]
    return sorted(failed, key=lambda f: (f["error"], f["node"]))


def _site_record(result: SiteResult, weight: float) -> dict[str, Any]:
    """A site's entry in the round's log line."""
    m, update = result.metrics, result.update
    return {"node": result.node, "bytes": result.bytes,
            "entries": int(update.size if update.dense else update.indices.size),
            "signal": float(m["signal"]), "reward_mean": float(m["reward_mean"]), "groups": int(m["groups"]),
            "shard_size": int(m["shard_size"]), "site_step": int(m["site_step"]), "weight": float(weight)}


def _too_few(rnd: int, valid: int, needed: int, failed: list[dict[str, Any]], refused: list) -> str:
    why = [f"node {f['node']}: {f['error']}" for f in failed]
    why += [f"site {r.site if r.site is not None else '?'}: {r.reason}" for r in refused]
    return (f"round {rnd}: {valid} valid site result(s), fewer than federated.min_sites = {needed} "
            f"({len(failed)} failed, {len(refused)} refused: {'; '.join(why) or 'no site answered'}); "
            f"nothing of round {rnd} was applied or checkpointed")


def _short(reason: str) -> str:
    """The last line of a remote traceback (the exception and its message)."""
    lines = [line.strip() for line in str(reason).splitlines() if line.strip()]
    return lines[-1][:300] if lines else "unknown error"

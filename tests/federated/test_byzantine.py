"""Sites that misbehave: every bad result is refused by name and the round goes on without it;
the robust aggregators against hand-worked numbers and their invariants.

The server tests drive ``FederatedServer`` through ``tests.federated.fakes.FakeGrid`` with replies
made up by the test (the tiny model gives the layout: N = 2048 entries), so no site trains.
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from hypothesis import given, settings
from hypothesis import strategies as st

from teamplay.config import FederatedConfig, build_config
from teamplay.errors import ConfigError
from teamplay.federated.aggregation import (
    AGGREGATORS,
    AggregatorOptions,
    aggregate,
    clip_norms,
    global_type_means,
    signal_weights,
)
from teamplay.federated.screen import RoundSpec, SiteRefusedWarning, TooFewSitesError, screen
from teamplay.federated.server import FederatedServer
from teamplay.federated.wire import get_vector
from tests.federated.fakes import NODE0, FakeGrid, log_of, made_up_reply, tiny_config

N = 2048  # tiny model, r = 2: its one adapter's LoRA entries
K = 5
SHARD = 2  # tiny_config: 2 problems per site


def honest_deltas(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [0.01 * rng.standard_normal(N).astype(np.float32) for _ in range(K)]


def train_message(site: int, rnd: int = 1) -> Message:
    return Message(RecordDict(), dst_node_id=NODE0 + site, message_type="train", group_id=str(rnd))


def _nan_at_7(d):
    bad = d.copy()
    bad[::300] = np.nan  # 7 of 2048 entries
    return bad


def _without_round(msg, d):
    reply = made_up_reply(msg, 4, d)
    metrics = dict(reply.content["metrics"])
    del metrics["round"]
    return Message(RecordDict({"update": reply.content["update"], "metrics": MetricRecord(metrics)}), reply_to=msg)


def _sparse(msg, d, indices):
    reply = made_up_reply(msg, 4, d)
    update = ArrayRecord({"indices": Array(np.array(indices, np.int32)), "values": Array(np.ones(2, np.float32))})
    return Message(RecordDict({"update": update, "metrics": reply.content["metrics"]}), reply_to=msg)


def _named(msg, d, arrays: dict):
    reply = made_up_reply(msg, 4, d)
    return Message(RecordDict({"update": ArrayRecord({k: Array(v) for k, v in arrays.items()}),
                               "metrics": reply.content["metrics"]}), reply_to=msg)


#: name -> (site 4's reply to its message ``msg`` given its honest delta ``d``, the reason's words)
BAD_REPLIES = {
    "nan in the update": (lambda msg, d: made_up_reply(msg, 4, _nan_at_7(d)), "7 of 2048 values are NaN or inf"),
    "inf in the update": (lambda msg, d: made_up_reply(msg, 4, d * np.float32(np.inf)), "NaN or inf"),
    "nan signal": (lambda msg, d: made_up_reply(msg, 4, d, signal=float("nan")), "non-finite metrics ['signal']"),
    "negative signal": (lambda msg, d: made_up_reply(msg, 4, d, signal=-1.0), "signal -1.0 < 0"),
    "wrong shape": (lambda msg, d: made_up_reply(msg, 4, d[:1]), "dense update of shape (1,), expected (2048,)"),
    "wrong array names": (lambda msg, d: _named(msg, d, {"weights": d}), "unexpected arrays ['weights']"),
    "sparse shapes": (lambda msg, d: _named(msg, d, {"indices": np.arange(3, dtype=np.int32),
                                                     "values": np.ones(2, np.float32)}),
                      "(3,) indices for (2,) values"),
    "repeated indices": (lambda msg, d: _sparse(msg, d, [5, 5]), "not strictly increasing"),
    "an index past the end": (lambda msg, d: _sparse(msg, d, [5, N]), "1 of 2 indices out of range [0, 2048)"),
    "a negative index": (lambda msg, d: _sparse(msg, d, [-1, 5]), "1 of 2 indices out of range [0, 2048)"),
    "extra record": (lambda msg, d: Message(RecordDict({**made_up_reply(msg, 4, d).content,
                                                        "transcripts": ConfigRecord({"text": "2 + 2"})}),
                                            reply_to=msg), "exactly 'update' and 'metrics'"),
    "missing metric": (_without_round, "metrics ['round'] missing"),
    "zero examples": (lambda msg, d: made_up_reply(msg, 4, d, shard_size=0), "claims 0 examples, its shard holds 2"),
    "more examples than its shard": (lambda msg, d: made_up_reply(msg, 4, d, shard_size=3),
                                     "claims 3 examples, its shard holds 2"),
    "fractional count": (lambda msg, d: made_up_reply(msg, 4, d, shard_size=1.5),
                         "'shard_size' is 1.5, not an integer"),
    "another round's number": (lambda msg, d: made_up_reply(msg, 4, d, round=2),
                               "reports round 2, was asked for round 1"),
    "another round's message": (lambda msg, d: made_up_reply(train_message(4, rnd=7), 4, d),
                                "answers the message of round '7', not round 1"),
    "outlying norm": (lambda msg, d: made_up_reply(msg, 4, d * 1000), "the round's median"),
}


# ------------------------------------------------------------------------------ the checks alone
@pytest.mark.parametrize("name", sorted(BAD_REPLIES))
def test_each_bad_reply_is_refused_by_site_with_its_reason(name, flower_identity):
    deltas = honest_deltas()
    make_bad, words = BAD_REPLIES[name]
    replies = [made_up_reply(train_message(s), s, deltas[s]) for s in range(4)]
    replies.append(make_bad(train_message(4), deltas[4]))
    spec = RoundSpec(1, tuple(NODE0 + s for s in range(K)), (SHARD,) * K, N, max_norm_ratio=10.0)
    results, refused = screen(replies[::-1], spec)  # arrival order must not matter
    assert [r.site for r in results] == [0, 1, 2, 3]
    (refusal,) = refused
    assert refusal.site == 4 and refusal.node == NODE0 + 4
    assert words in refusal.reason
    assert refusal.message(1).startswith(f"round 1: site 4 (node {NODE0 + 4}) left out: ")


def test_replies_from_elsewhere_are_refused(flower_identity):
    deltas = honest_deltas()
    spec = RoundSpec(1, tuple(NODE0 + s for s in range(K)), (SHARD,) * K, N, max_norm_ratio=10.0)
    stranger = Message(RecordDict(), dst_node_id=999, message_type="train", group_id="1")
    replies = [made_up_reply(train_message(s), s, deltas[s]) for s in range(3)]
    replies += [made_up_reply(stranger, 4, deltas[4]),  # a node this round never asked
                made_up_reply(train_message(3), 7, deltas[3]),  # a site index beyond the 5 sites
                made_up_reply(train_message(4), 2, deltas[4])]  # node 4 claims site 2, which node 2 holds
    results, refused = screen(replies, spec)
    assert [r.site for r in results] == [0, 1]
    assert [(r.site, r.node) for r in refused] == [(2, NODE0 + 2), (2, NODE0 + 4), (4, 999), (None, NODE0 + 3)]
    assert "2 replies claim site 2" in refused[0].reason and "2 replies claim site 2" in refused[1].reason
    assert "node 999 was not asked in round 1" in refused[2].reason
    assert "metric 'site' is 7, not one of the 5 site indices" in refused[3].reason
    assert refused[3].message(1).startswith(f"round 1: node {NODE0 + 3} (site unknown) left out")


def test_the_norm_check_needs_three_updates_and_a_scale(flower_identity):
    spec = RoundSpec(1, tuple(NODE0 + s for s in range(K)), (SHARD,) * K, N, max_norm_ratio=10.0)
    one, zero = np.full(N, 0.01, np.float32), np.zeros(N, np.float32)

    def round_of(*deltas):
        return screen([made_up_reply(train_message(s), s, d) for s, d in enumerate(deltas)], spec)

    # 2 updates: the median is their mean, so a 1000x update is only ~2x it: nothing to tell
    results, refused = round_of(one, 1000 * one)
    assert len(results) == 2 and not refused
    # norms r, r, 1000 r: median r, 1000 r > 10 x r -> refused, the others kept
    results, refused = round_of(one, one, 1000 * one)
    assert [r.site for r in results] == [0, 1] and refused[0].site == 2 and "is 1000.0x the round's median" \
        in refused[0].reason
    # median 0 (most sites did not move): no scale to compare with, nothing refused
    results, refused = round_of(zero, zero, one)
    assert len(results) == 3 and not refused
    # the check off
    results, refused = screen([made_up_reply(train_message(s), s, d) for s, d in enumerate([one, one, 1000 * one])],
                              RoundSpec(1, spec.nodes, spec.shard_sizes, N, max_norm_ratio=None))
    assert len(results) == 3 and not refused


# ----------------------------------------------------------------------------- the server round
def server_and_start(tmp_path, **federated):
    cfg = build_config(FederatedConfig, tiny_config(tmp_path, clients=K, **federated))
    server = FederatedServer(cfg)
    return server, get_vector(server.team_model, server.layout, server.trainable)


@pytest.mark.parametrize("name", ["nan in the update", "nan signal", "wrong shape"])
def test_a_bad_site_is_left_out_and_the_round_completes(tmp_path, flower_identity, name):
    server, start = server_and_start(tmp_path)
    deltas = honest_deltas()
    make_bad, words = BAD_REPLIES[name]

    def answer(msg, site):
        return [make_bad(msg, deltas[site]) if site == 4 else made_up_reply(msg, site, deltas[site])]

    who = rf"^round 1: site 4 \(node {NODE0 + 4}\) left out: "
    with pytest.warns(SiteRefusedWarning, match=who + f".*{re.escape(words)}"):
        server.run(FakeGrid(K, answer))
    (record,) = log_of(server.run_dir)
    assert record["counts"] == {"asked": 5, "aggregated": 4, "failed": 0, "refused": 1}
    assert record["refused"][0]["site"] == 4 and words in record["refused"][0]["reason"]
    assert sorted(record["sites"]) == ["0", "1", "2", "3"]
    # the global team moved by the 4 honest deltas alone, with Fed-GRPO's weights of their signals
    # 0.1, 0.2, 0.3, 0.4 (made_up_reply): 0.1, 0.2, 0.3, 0.4 over 1.0
    w = signal_weights([0.1, 0.2, 0.3, 0.4], floor=0.05)
    np.testing.assert_allclose(w, [0.1, 0.2, 0.3, 0.4], rtol=1e-12)
    expected = start.astype(np.float64) + sum(wi * deltas[s].astype(np.float64) for s, wi in enumerate(w))
    end = get_vector(server.team_model, server.layout, server.trainable)
    np.testing.assert_allclose(end, expected.astype(np.float32), rtol=1e-6, atol=1e-7)
    assert np.all(np.isfinite(end))
    assert (server.run_dir / "checkpoints" / "step-000001" / "server_state.json").is_file()


def test_too_few_sites_left_stop_the_run_with_one_error(tmp_path, flower_identity):
    server, _ = server_and_start(tmp_path, min_sites=4)
    deltas = honest_deltas()

    def answer(msg, site):
        if site == 0:
            return []  # never answers (a timeout)
        if site == 4:
            return [made_up_reply(msg, site, _nan_at_7(deltas[site]))]
        return [made_up_reply(msg, site, deltas[site])]

    with warnings.catch_warnings(record=True) as seen, pytest.raises(TooFewSitesError) as error:
        warnings.simplefilter("always")
        server.run(FakeGrid(K, answer))
    message = str(error.value)
    assert message.startswith("round 1: 3 valid site result(s), fewer than federated.min_sites = 4 "
                              "(1 failed, 1 refused: ")
    assert f"node {NODE0}: no reply within 3600 s" in message and "site 4: update: 7 of 2048 values" in message
    assert "\n" not in message
    assert [str(w.message) for w in seen if w.category is SiteRefusedWarning] == [
        f"round 1: site 4 (node {NODE0 + 4}) left out: update: 7 of 2048 values are NaN or inf"]
    # nothing of the round was kept
    assert not (server.run_dir / "checkpoints").exists() and not (server.run_dir / "federated.jsonl").exists()


# --------------------------------------------------------------------- the aggregators by hand
DELTAS = np.array([[1.0, -2.0, 0.0],
                   [3.0, 0.0, 0.0],
                   [2.0, 4.0, 0.0],
                   [100.0, -100.0, 0.0],
                   [0.0, 1.0, 0.0]])  # site 3 is the outlier


def rule(name: str, deltas=DELTAS, weights=None, **options) -> np.ndarray:
    w = np.full(len(deltas), 1 / len(deltas)) if weights is None else np.asarray(weights)
    return AGGREGATORS[name].rule(deltas, w, AggregatorOptions(**options))


def test_median_trimmed_mean_and_clipping_by_hand():
    # column 0: 1, 3, 2, 100, 0 -> sorted 0, 1, 2, 3, 100 -> median 2; column 1: -2, 0, 4, -100, 1 -> 0
    np.testing.assert_array_equal(rule("median"), [2.0, 0.0, 0.0])  # exact: a median of 5 is a copied middle value
    # trim 0.2 of 5 -> cut 1 per tail: column 0 keeps 1, 2, 3 -> 2; column 1 keeps -2, 0, 1 -> -1/3
    np.testing.assert_allclose(rule("trimmed_mean", trim_fraction=0.2), [2.0, -1 / 3, 0.0], rtol=1e-15)
    # trim 0.1 of 5 -> floor(0.5) = 0 cut: the plain mean, (1+3+2+100+0)/5 = 21.2, (-2+0+4-100+1)/5 = -19.4
    np.testing.assert_allclose(rule("trimmed_mean", trim_fraction=0.1), [21.2, -19.4, 0.0], rtol=1e-15)
    # norms sqrt(5), 3, sqrt(20), 100 sqrt(2), 1 -> median 3; clip_factor 1 -> bound 3: site 2
    # [2, 4] (norm 2 sqrt 5) -> [2, 4] * 3 / (2 sqrt 5); site 3 -> [3, -3] / sqrt 2; others unchanged
    clipped = clip_norms(DELTAS, 3.0)
    np.testing.assert_allclose(clipped[2], [3 / np.sqrt(5), 6 / np.sqrt(5), 0.0], rtol=1e-15)
    np.testing.assert_allclose(clipped[3], [3 / np.sqrt(2), -3 / np.sqrt(2), 0.0], rtol=1e-15)
    np.testing.assert_array_equal(clipped[[0, 1, 4]], DELTAS[[0, 1, 4]])  # exact: rows within the bound are copied
    np.testing.assert_allclose(rule("clipped_mean", clip_factor=1.0), clipped.mean(axis=0), rtol=1e-15)
    # the mean is the weighted one: weights 0.5, 0.5, 0, 0, 0 -> [2, -1, 0]
    np.testing.assert_allclose(rule("mean", weights=[0.5, 0.5, 0, 0, 0]), [2.0, -1.0, 0.0], rtol=1e-15)
    # a zero row stays zero, and bound 0 zeroes every row (no division by a zero norm)
    # exact: zero rows stay 0 and bound 0 gives 0
    np.testing.assert_array_equal(clip_norms(np.zeros((2, 3)), 1.0), np.zeros((2, 3)))
    # exact: zero rows stay 0 and bound 0 gives 0
    np.testing.assert_array_equal(clip_norms(DELTAS, 0.0), np.zeros_like(DELTAS))


def test_aggregate_refuses_what_would_spread_over_every_entry():
    global_vec = np.zeros(3, np.float32)
    good = [np.ones(3, np.float32)] * 2
    # a [1]-shaped delta would broadcast over all 3 entries
    with pytest.raises(ValueError, match=re.escape("delta 1 has shape (1,), the global vector (3,)")):
        aggregate(global_vec, [good[0], np.array([5.0], np.float32)], np.array([0.5, 0.5]))
    with pytest.raises(ValueError, match="must be finite"):
        aggregate(global_vec, [good[0], np.array([np.nan, 0, 0], np.float32)], np.array([0.5, 0.5]))
    with pytest.raises(ValueError, match="no delta"):
        aggregate(global_vec, [], np.zeros(0))
    # a NaN signal used to make every weight NaN (np.maximum(nan, floor) is nan)
    with pytest.raises(ValueError, match="signals must be finite"):
        signal_weights([0.2, float("nan")], floor=0.05)
    # exact: a median of equal values is that value
    np.testing.assert_array_equal(aggregate(global_vec, good, np.array([0.5, 0.5]), "median"), np.ones(3))


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 7), st.integers(1, 6), st.integers(0, 10**6), st.sampled_from(sorted(AGGREGATORS)))
def test_aggregators_do_not_depend_on_the_order_of_sites(k, n, seed, name):
    rng = np.random.default_rng(seed)
    deltas = rng.standard_normal((k, n)) * rng.choice([1.0, 100.0], size=(k, 1))
    weights = rng.random(k) + 0.1
    weights /= weights.sum()
    perm = rng.permutation(k)
    options = AggregatorOptions(trim_fraction=0.25, clip_factor=1.5)
    a = AGGREGATORS[name].rule(deltas, weights, options)
    b = AGGREGATORS[name].rule(deltas[perm], weights[perm], options)
    # the rules are order-free; only the float sums inside the means may round differently
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 194), min_size=3, max_size=8), st.randoms(use_true_random=False))
def test_the_calibration_table_does_not_depend_on_reply_order(sums, rng):
    # reward sums k/97 of 2 episodes each: in plain float addition, 3+ such terms in another order
    # often differ in the last bit; the table must be bit-identical in every order
    reports = [{"1": (s / 97, 2)} for s in sums]
    shuffled = list(reports)
    rng.shuffle(shuffled)
    assert global_type_means(shuffled, {}) == global_type_means(reports, {})


# --------------------------------------------------------------------------------- the config
def test_robust_config_is_validated():
    ok = build_config(FederatedConfig, {"federated": {"clients": 5, "min_sites": 3, "strategy": "fedavg",
                                                      "robust": {"aggregator": "trimmed_mean"}}})
    # exact: config defaults, stored
    assert ok.federated.robust.trim_fraction == 0.2 and ok.federated.robust.max_norm_ratio == 10.0
    assert set(AGGREGATORS) == {"mean", "median", "trimmed_mean", "clipped_mean"}
    bad = [({"robust": {"aggregator": "krum"}}, "federated.robust.aggregator"),
           ({"robust": {"trim_fraction": 0.5}}, "federated.robust.trim_fraction"),
           ({"robust": {"clip_factor": 0}}, "federated.robust.clip_factor"),
           ({"robust": {"max_norm_ratio": 1.0}}, "federated.robust.max_norm_ratio"),
           ({"clients": 3, "min_sites": 4}, "federated.min_sites: 4 is more than the 3 sites"),
           ({"clients": 3, "robust": {"aggregator": "trimmed_mean"}}, "0.2 of 3 sites trims nothing"),
           ({"fedgrpo": {"budget": 0.1}, "robust": {"aggregator": "median"}}, "median of sparse uploads")]
    for federated, message in bad:
        with pytest.raises(ConfigError, match=re.escape(message)):
            build_config(FederatedConfig, {"federated": federated})

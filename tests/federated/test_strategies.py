"""Fed-GRPO's aggregation, budget split, sparsification and calibration against hand-worked numbers."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from teamplay.federated.aggregation import (
    ErrorFeedback,
    aggregate,
    calibration_weight,
    fedavg_weights,
    global_type_means,
    signal_weights,
    split_budget,
    top_k,
)
from teamplay.federated.partition import partition
from teamplay.records import TaskItem


def test_signal_weights_are_proportional_to_std_with_the_floor():
    # signals 0.5, 0.0, 0.25 with floor 0.1 -> floored 0.5, 0.1, 0.25; sum 0.85
    # weights 0.5/0.85 = 0.588235..., 0.1/0.85 = 0.117647..., 0.25/0.85 = 0.294117...
    w = signal_weights([0.5, 0.0, 0.25], floor=0.1)
    np.testing.assert_allclose(w, [0.5 / 0.85, 0.1 / 0.85, 0.25 / 0.85], rtol=1e-12)
    # the site with no signal keeps its floor share instead of dropping out
    assert w[1] > 0
    # all sites without signal: every one at the floor, equal weights 1/3
    np.testing.assert_allclose(signal_weights([0.0, 0.0, 0.0], floor=0.05), [1 / 3] * 3)


def test_fedavg_weights_by_data_size_and_aggregate():
    # shard sizes 10, 30 -> weights 0.25, 0.75
    w = fedavg_weights([10, 30])
    np.testing.assert_allclose(w, [0.25, 0.75])
    # global [1, 1] + 0.25*[4, 0] + 0.75*[0, -4] = [2, -2]
    out = aggregate(np.array([1.0, 1.0], np.float32), [np.array([4.0, 0.0]), np.array([0.0, -4.0])], w)
    # exact: 1 + 0.25 * 4 and 1 - 0.75 * 4: exact in float32
    np.testing.assert_array_equal(out, np.array([2.0, -2.0], np.float32))


def test_budget_split_by_signal_with_water_filling():
    # B = 0.5, N = 10, K = 3 -> 15 entries; signals 0.6, 0.3, 0.1 (floor below all)
    # proportional: 9, 4.5, 1.5 -> none over N -> floors 9, 4, 1
    assert split_budget(0.5, 10, [0.6, 0.3, 0.1], floor=0.01) == [9, 4, 1]
    # B = 0.8 -> 24 entries: proportional 14.4 > 10 -> site 0 capped at 10; the 14 left go to
    # sites 1 and 2 in proportion 0.3 : 0.1 -> 10.5 (capped at 10) and 3.5 -> then site 2 gets
    # the remaining 4
    assert split_budget(0.8, 10, [0.6, 0.3, 0.1], floor=0.01) == [10, 10, 4]
    # B = 1: every site dense, whatever the signals
    assert split_budget(1.0, 10, [0.9, 0.0, 0.1], floor=0.05) == [10, 10, 10]


def test_budget_of_100_percent_equals_dense_upload_exactly():
    rng = np.random.default_rng(0)
    n, sites = 257, 3
    global_vec = rng.standard_normal(n).astype(np.float32)
    deltas = [rng.standard_normal(n).astype(np.float32) for _ in range(sites)]
    weights = signal_weights([0.4, 0.0, 0.2], floor=0.05)
    entries = split_budget(1.0, n, [0.4, 0.0, 0.2], floor=0.05)
    sent = [ErrorFeedback(n).compress(d, k) for d, k in zip(deltas, entries, strict=True)]
    assert all(u.dense for u in sent)  # sent as the plain vector: no index overhead either
    sparse_path = aggregate(global_vec, [u.to_dense() for u in sent], weights)
    dense_path = aggregate(global_vec, deltas, weights)
    # exact: to_dense copies the dense vector: the same aggregate on the same bits
    np.testing.assert_array_equal(sparse_path, dense_path)


def test_top_k_by_hand():
    # magnitudes 0.1, 3, 2, 0.5, 4, 1 -> top 2 are index 4 (4) and index 1 (-3)
    v = np.array([0.1, -3.0, 2.0, 0.5, 4.0, 1.0], np.float32)
    u = top_k(v, 2)
    assert not u.dense
    assert u.indices.tolist() == [1, 4] and u.values.tolist() == [-3.0, 4.0]
    assert u.nbytes == 2 * 4 + 2 * 4  # two int32 indices, two float32 values
    np.testing.assert_array_equal(u.to_dense(), [0, -3, 0, 0, 4, 0])
    # k = 3 of 6 entries: sparse would cost 24 bytes = dense's 24, so the dense vector is sent,
    # with the same three entries kept
    d = top_k(v, 3)
    assert d.dense and d.indices.size == 0
    np.testing.assert_array_equal(d.to_dense(), [0, -3, 2, 0, 4, 0])


def test_error_feedback_conserves_the_sum_of_deltas_by_hand():
    ef = ErrorFeedback(3)
    # round 1: delta [3, 1, -2], k=1 -> send [3, 0, 0], residual [0, 1, -2]
    u1 = ef.compress(np.array([3.0, 1.0, -2.0]), 1)
    np.testing.assert_array_equal(u1.to_dense(), [3, 0, 0])
    np.testing.assert_array_equal(ef.residual, [0, 1, -2])
    # round 2: delta [0, 1, 1] + residual [0, 1, -2] = [0, 2, -1], k=1 -> send [0, 2, 0], residual [0, 0, -1]
    u2 = ef.compress(np.array([0.0, 1.0, 1.0]), 1)
    np.testing.assert_array_equal(u2.to_dense(), [0, 2, 0])
    np.testing.assert_array_equal(ef.residual, [0, 0, -1])
    # sent [3, 2, 0] + residual [0, 0, -1] = sum of deltas [3, 2, -1]
    np.testing.assert_array_equal(u1.to_dense() + u2.to_dense() + ef.residual, [3, 2, -1])


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 40), st.integers(1, 6), st.integers(0, 10**6), st.floats(0.01, 1.0))
def test_error_feedback_conserves_over_any_rounds(n, rounds, seed, frac):
    rng = np.random.default_rng(seed)
    ef = ErrorFeedback(n)
    total_delta = np.zeros(n)
    total_sent = np.zeros(n)
    for _ in range(rounds):
        delta = rng.standard_normal(n).astype(np.float32)
        total_delta += delta
        total_sent += ef.compress(delta, max(1, int(frac * n))).to_dense()
    np.testing.assert_allclose(total_sent + ef.residual, total_delta, atol=1e-4)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=6), st.floats(0.01, 1.0), st.integers(1, 500))
def test_budget_split_never_exceeds_dense_nor_the_budget(signals, budget, n):
    split = split_budget(budget, n, signals, floor=0.05)
    assert all(1 <= k <= n for k in split)
    # integer floors only lose entries; the guaranteed 1 per site adds at most 1 each
    assert sum(split) <= budget * n * len(signals) + len(signals)


def test_calibration_weight_by_hand():
    # global 0.6, this problem's group solved 0.2 of the time: 1 + 1.0 * (0.6 - 0.2) = 1.4
    assert calibration_weight(0.6, 0.2, 1.0, 0.5, 2.0) == pytest.approx(1.4)
    # a problem this site finds easier than the federation: 1 + 2 * (0.1 - 0.9) = -0.6 -> clipped to 0.5
    assert calibration_weight(0.1, 0.9, 2.0, 0.5, 2.0) == 0.5  # exact: clipped to the bound 0.5
    # the table: type "1" sums 3 of 4 and 1 of 4 over two sites -> 4/8 = 0.5; type "2" only
    # reported by site 2: 0/4; type "3" not reported this round keeps its old 0.7
    table = global_type_means([{"1": (3.0, 4)}, {"1": (1.0, 4), "2": (0.0, 4)}], {"3": 0.7, "1": 0.1})
    assert table == {"1": 0.5, "2": 0.0, "3": 0.7}  # exact: 4 / 8 and 0 / 4 are exact, 0.7 is kept


def test_partitions_cover_every_problem_once():
    items = [TaskItem(id=f"p{i}", prompt="", reference="", metadata={"level": 1 + i % 3}) for i in range(10)]
    for how in ("iid", "by_key"):
        shards = partition(items, 3, how, "level", seed=0)
        ids = sorted(it.id for shard in shards for it in shard)
        assert ids == sorted(it.id for it in items) and all(shards)
    # by_key: sorted by level, cut into sizes 3, 4, 3 (rounded linspace 0, 3.33, 6.67, 10)
    shards = partition(items, 3, "by_key", "level", seed=0)
    assert [[it.metadata["level"] for it in s] for s in shards] == [[1, 1, 1], [1, 2, 2, 2], [3, 3, 3]]


def test_federated_config_refuses_what_it_cannot_honour():
    from teamplay.config import FederatedConfig, build_config
    from teamplay.errors import ConfigError
    from teamplay.federated.client import site_config

    ok = build_config(FederatedConfig, {"federated": {"rounds": 3, "local_steps": 2}})
    assert site_config(ok, 0, Path("sites")).steps == 6  # a site's LR schedule spans rounds x local steps
    sent = build_config(FederatedConfig, ok.model_dump(mode="json"))  # the copy sent to sites
    assert site_config(sent, 0, Path("sites")).steps == 6
    bad = [({"steps": 3}, "steps/eval_every"),
           ({"controllers": {"enabled": True}}, "controllers.enabled"),
           ({"federated": {"clients": 2, "failure_drills": [{"site": 2, "round": 1}]}}, "site 2 does not exist"),
           ({"federated": {"extra_tasks": [{"name": "gsm8k"}]}}, "one task (verifier) per run"),
           ({"federated": {"fedgrpo": {"budget": 0}}}, "federated.fedgrpo.budget")]
    for data, message in bad:
        with pytest.raises(ConfigError, match=re.escape(message)):
            build_config(FederatedConfig, data)

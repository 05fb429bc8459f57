"""``TeamStrategy``, the round policy as a Flower ``Strategy``, on its own: the messages it sends
and the aggregate it makes of replies made up by hand (no model, no site)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord
from flwr.serverapp.strategy import Strategy

from teamplay.config import FederatedConfig, build_config
from teamplay.federated.screen import SiteRefusedWarning, TooFewSitesError
from teamplay.federated.team_strategy import ServerState, TeamStrategy
from tests.federated.fakes import NODE0, FakeGrid, made_up_reply

N = 10


def strategy(state: ServerState | None = None, **federated) -> TeamStrategy:
    cfg = build_config(FederatedConfig, {"federated": {"clients": 3, **federated}})
    return TeamStrategy(cfg.federated, N, shard_sizes=(2, 2, 2), state=state)


def global_vector() -> ArrayRecord:
    return ArrayRecord({"vector": Array(np.arange(N, dtype=np.float32))})


def configure(policy: TeamStrategy, grid: FakeGrid, rnd: int = 1) -> list:
    return list(policy.configure_train(rnd, global_vector(), ConfigRecord({"run_config": "{}"}), grid))


def run_round(policy: TeamStrategy, reply, rnd: int = 1):
    """Configure round ``rnd``, let ``reply(message, site)`` answer, aggregate what came."""
    grid = FakeGrid(3, reply)
    messages = configure(policy, grid, rnd)
    grid.push_messages(messages)
    replies = grid.pull_messages([m.metadata.message_id for m in messages])
    return messages, policy.aggregate_train(rnd, replies)


def test_it_is_a_flower_strategy_that_sends_each_site_its_orders(flower_identity):
    # sparse Fed-GRPO with B = 0.5: 0.5 x 10 entries x 3 sites = 15, split by the signals of the
    # last round (site 2 has none yet: it gets the mean of the others, 0.2): 0.1 : 0.3 : 0.2
    state = ServerState(round=2, calibration={"1": 0.25}, signals={"0": 0.1, "1": 0.3}, restore={"0": 2, "1": 1})
    policy = strategy(state, fedgrpo={"budget": 0.5})
    assert isinstance(policy, Strategy)
    messages = configure(policy, FakeGrid(3, lambda message, site: []), rnd=3)
    assert [m.metadata.dst_node_id for m in messages] == [NODE0, NODE0 + 1, NODE0 + 2]
    assert {(m.metadata.message_type, m.metadata.group_id) for m in messages} == {("train", "3")}
    config = messages[0].content["config"]
    assert config["round"] == 3 and config["run_config"] == "{}"
    assert json.loads(config["restore"]) == {"0": 2, "1": 1}  # site 2 was never aggregated: a fresh start
    assert json.loads(config["entries"]) == {"0": 2, "1": 7, "2": 5}  # 15 x (1/6, 1/2, 1/3), floored
    assert json.loads(config["calibration"]) == {"1": 0.25}  # exact: the state's value, through JSON unchanged
    # exact: integers stored as float32, copied
    np.testing.assert_array_equal(messages[0].content["global"]["vector"].numpy(), np.arange(N))
    # FedAvg uploads dense
    messages = configure(strategy(strategy="fedavg"), FakeGrid(3, lambda message, site: []))
    assert json.loads(messages[0].content["config"]["entries"]) == {"0": N, "1": N, "2": N}


def test_the_aggregate_of_made_up_replies(flower_identity):
    # site k sends delta = (k + 1) x ones with signal 0.1 (k + 1): Fed-GRPO weights 1/6, 2/6, 3/6,
    # so the global vector moves by 1/6 + 4/6 + 9/6 = 7/3 on every entry
    policy = strategy()
    _, (arrays, metrics) = run_round(policy, lambda message, site: [
        made_up_reply(message, site, np.full(N, site + 1.0), **{"type_sum/1": site, "type_count/1": 2})])
    np.testing.assert_allclose(arrays["vector"].numpy(), np.arange(N) + 7 / 3, rtol=1e-6)
    assert metrics["aggregated"] == 3 and metrics["failed"] == metrics["refused"] == 0
    # the state the next round starts from: every site restores round 1, its signal kept, and
    # the calibration table's type 1 at (0 + 1 + 2) / (2 + 2 + 2)
    signals = {str(k): 0.1 * (k + 1) for k in range(3)}  # as the replies carry them
    assert policy.state == ServerState(round=1, calibration={"1": 0.5}, signals=signals, aggregated=[0, 1, 2],
                                       restore={"0": 1, "1": 1, "2": 1})
    line = policy.log_fields()
    assert [line["sites"][s]["weight"] for s in "012"] == pytest.approx([1 / 6, 2 / 6, 3 / 6])


def test_failures_and_refusals_are_left_out(flower_identity):
    # site 0 never answers, site 1 sends NaN: site 2 alone is aggregated, with weight 1
    def reply(message, site):
        if site == 0:
            return []
        return [made_up_reply(message, site, np.full(N, np.nan if site == 1 else 2.0))]

    policy = strategy()
    with pytest.warns(SiteRefusedWarning, match="site 1"):
        _, (arrays, metrics) = run_round(policy, reply)
    # exact: integers stored as float32 plus 2.0
    np.testing.assert_array_equal(arrays["vector"].numpy(), np.arange(N) + 2.0)
    assert (metrics["asked"], metrics["aggregated"], metrics["failed"], metrics["refused"]) == (3, 1, 1, 1)
    assert policy.state.restore == {"2": 1} and policy.state.aggregated == [2]
    # with min_sites 2 the same round stops the run, and the state stays as it was
    policy = strategy(min_sites=2)
    with pytest.warns(SiteRefusedWarning), pytest.raises(TooFewSitesError, match="fewer than federated.min_sites = 2"):
        run_round(policy, reply)
    assert policy.state == ServerState()

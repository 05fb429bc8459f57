"""Two runs of one federated config and seed give the same per-round log and the same adapters,
whatever order the sites' replies arrive in, and whether or not a site left out of a round
finished it in the background.

What used to differ: (1) the calibration table summed the sites' reward sums in arrival order,
and with 3 or more sites a float sum in another order can differ in its last bit; (2) a site
whose reply the server did not use restored its state of that round if it had managed to write it
(a late site) and its older state if not (a site that never ran), so the next rounds depended on
timing; it could also pick up a state file an earlier run left in the same folder. The sites here
run in-process (``tests.federated.fakes.FakeGrid``): the real ``handle_train`` and server, only
Flower's transport replaced, so the test controls arrival order and lateness exactly.
"""

from __future__ import annotations

import numpy as np
import pytest

from teamplay.config import FederatedConfig, build_config
from teamplay.errors import ConfigError
from teamplay.federated.server import FederatedServer
from teamplay.federated.wire import get_vector
from tests.federated.fakes import FRACTIONAL_TASK, FakeGrid, log_of, real_sites, tiny_config

#: a seed whose round-1 calibration table, summed in arrival order, differs in its last bit when
#: the replies arrive reversed (seeds 2, 5, 6, 8 and 10 of 0-11 do)
SEED = 6


def run_once(data: dict, reverse: bool, skip_site_3: str) -> tuple[list[dict], np.ndarray, np.ndarray]:
    """One run: its log (without ``seconds``), initial and final adapters. Replies arrive in site
    order or reversed; site 3's round-1 reply never arrives ("late": the site ran and saved its
    state; "absent": it never ran)."""
    server = FederatedServer(build_config(FederatedConfig, data))
    start = get_vector(server.team_model, server.layout, server.trainable)
    skip = lambda rnd, site: skip_site_3 if (rnd, site) == (1, 3) else None  # noqa: E731
    order = (lambda rnd, replies: replies[::-1]) if reverse else (lambda rnd, replies: replies)
    server.run(FakeGrid(4, real_sites(server.run_dir / "sites", skip), order))
    log = log_of(server.run_dir)
    for record in log:
        record.pop("seconds")
    return log, start, get_vector(server.team_model, server.layout, server.trainable)


def test_two_runs_give_identical_rounds_and_adapters(tmp_path, flower_identity):
    data = tiny_config(tmp_path, task=FRACTIONAL_TASK, clients=4, rounds=2)
    data["seed"] = SEED
    first, start, end_first = run_once(data, reverse=False, skip_site_3="late")
    elsewhere = {**data, "output_dir": str(tmp_path / "elsewhere")}
    second, _, end_second = run_once(elsewhere, reverse=True, skip_site_3="absent")
    # the first run's folder again: its site states (site 3's of round 1 included) are still there
    third, _, end_third = run_once(data, reverse=True, skip_site_3="absent")
    assert first == second == third
    np.testing.assert_array_equal(end_first, end_second)  # exact: same ops in a fixed order (sites sorted), one machine
    np.testing.assert_array_equal(end_first, end_third)  # exact: same ops in a fixed order (sites sorted), one machine
    # not a trivial run: site 3 left out of round 1, every site in round 2 with unequal weights,
    # a calibration table of fractional rewards, and adapters that moved
    one, two = first
    assert sorted(one["sites"]) == ["0", "1", "2"] and one["counts"]["failed"] == 1
    assert sorted(two["sites"]) == ["0", "1", "2", "3"]
    assert len({s["weight"] for s in two["sites"].values()}) == 4
    assert 0 < one["calibration"]["1"] < 1
    assert not np.array_equal(start, end_first)  # exact: asserts a difference: the run moved the adapters


def test_a_site_keeps_the_state_it_restored_and_newer_ones(tmp_path):
    from teamplay.federated.client import _prune_states, _state_path
    from teamplay.training.store.checkpoint import checkpoint_dir, list_checkpoints

    def save(round_: int, restored: int) -> None:  # what a site does after a round: write, then prune
        checkpoint_dir(tmp_path, round_).mkdir(parents=True, exist_ok=True)
        _prune_states(tmp_path, round_, restored)

    def kept() -> list[str]:
        return [p.name for p in list_checkpoints(tmp_path)]

    for r in (1, 2, 3, 4, 5):  # each round restored the one before
        save(r, r - 1)
    assert kept() == ["step-000004", "step-000005"]
    # a late copy of round 3 finishing now leaves the newer states alone
    save(3, 2)
    assert kept() == ["step-000003", "step-000004", "step-000005"]
    # round 6 restored round 4 (the server left this site out of round 5): 3 and 5 are never restored again
    save(6, 4)
    assert kept() == ["step-000004", "step-000006"]
    with pytest.raises(ConfigError, match=r"step-000005: missing; the server aggregated this site's round 5"):
        _state_path(tmp_path, 5)

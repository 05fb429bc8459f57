"""A federated run is a run like any other: its sites train with the objective it names (GSPO
too), and its global team is what ``teamplay eval --checkpoint``, ``eval --team`` and
``teamplay export`` read from its folder.

The run: 2 sites, 1 round, in-process (``tests.federated.fakes.FakeGrid``): the real server and
``handle_train``, so each site rebuilds the run's config from the ``run_config`` the server sends.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from teamplay.config import FederatedConfig, build_config
from teamplay.federated.server import FederatedServer
from teamplay.federated.wire import get_vector
from tests.federated.fakes import FRACTIONAL_TASK, FakeGrid, log_of, real_sites, tiny_config


@pytest.fixture(scope="module")
def gspo_run(tmp_path_factory):
    """A 1-round GSPO run of 2 sites: its config (as data) and the global adapters before and after."""
    from flwr.supercore.task_identity import TaskIdentity

    folder = tmp_path_factory.mktemp("fed")
    data = tiny_config(folder, task=FRACTIONAL_TASK, clients=2, rounds=1)  # fractional rewards: the round moves
    data["objective"] = {"name": "gspo", "clip_low": 0.2}
    with pytest.MonkeyPatch.context() as patch:  # as the ``flower_identity`` fixture, for the module
        for name, value in (("_run_id", 1), ("_node_id", 0), ("_task_id", 1)):
            patch.setattr(TaskIdentity, name, value)
        server = FederatedServer(build_config(FederatedConfig, data))
        before = get_vector(server.team_model, server.layout, server.trainable)
        server.run(FakeGrid(2, real_sites(server.run_dir / "sites")))
    return data, before, get_vector(server.team_model, server.layout, server.trainable)


def test_gspo_sites_train_a_round(gspo_run):
    # each site rebuilt the run's config from the server's full dump (every field set, loss_agg
    # included), which GSPO's refusal of loss_agg used to reject at every site
    data, before, after = gspo_run
    (record,) = log_of(Path(data["output_dir"]))
    assert sorted(record["sites"]) == ["0", "1"] and record["failed"] == []
    assert not np.array_equal(before, after)

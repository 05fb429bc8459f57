"""The federated server's checkpoints have the trainer's format (``checkpoint.write_checkpoint``):
a manifest of SHA-256 sums, checked on resume. A damaged newest checkpoint is skipped with one
warning by ``--resume auto``, and named in a one-line error when asked for by path."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from teamplay.config import FederatedConfig, build_config
from teamplay.federated.server import FederatedServer
from teamplay.federated.wire import get_vector
from teamplay.training.store.checkpoint import CheckpointError, list_checkpoints
from tests.federated.fakes import FRACTIONAL_TASK, FakeGrid, real_sites, tiny_config


@pytest.fixture(scope="module")
def two_rounds(tmp_path_factory):
    """A 2-round run of 2 sites; its config and the adapters after rounds 1 and 2."""
    from flwr.supercore.task_identity import TaskIdentity

    folder = tmp_path_factory.mktemp("fed")
    data = tiny_config(folder, task=FRACTIONAL_TASK, clients=2, rounds=1)  # fractional rewards: every round moves
    with pytest.MonkeyPatch.context() as patch:  # as the ``flower_identity`` fixture, for the module
        for name, value in (("_run_id", 1), ("_node_id", 0), ("_task_id", 1)):
            patch.setattr(TaskIdentity, name, value)
        server = FederatedServer(build_config(FederatedConfig, data))
        server.run(FakeGrid(2, real_sites(server.run_dir / "sites")))
        after_one = get_vector(server.team_model, server.layout, server.trainable)
        data["federated"]["rounds"] = 2
        server = FederatedServer(build_config(FederatedConfig, data), resume="auto")
        server.run(FakeGrid(2, real_sites(server.run_dir / "sites")))
    return data, after_one, get_vector(server.team_model, server.layout, server.trainable)


def test_each_round_checkpoint_has_a_manifest_of_its_files(two_rounds):
    data, _, _ = two_rounds
    checkpoints = list_checkpoints(Path(data["output_dir"]))
    assert [p.name for p in checkpoints] == ["step-000001", "step-000002"]
    for path in checkpoints:
        files = json.loads((path / "manifest.json").read_text())["files"]
        on_disk = sorted(p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file()
                         and p.name != "manifest.json")
        assert sorted(files) == on_disk and "server_state.json" in files


def test_resume_auto_skips_a_damaged_newest_checkpoint(two_rounds):
    data, after_one, after_two = two_rounds
    assert not np.array_equal(after_one, after_two)  # exact: asserts a difference: round 2 moved the adapters
    newest = list_checkpoints(Path(data["output_dir"]))[-1]
    state = newest / "server_state.json"
    good = state.read_bytes()
    try:
        state.write_bytes(good.replace(b'"round": 2', b'"round": 9'))  # same size, other bytes
        with pytest.warns(UserWarning, match="skipping damaged checkpoint: .*server_state.json"):
            server = FederatedServer(build_config(FederatedConfig, data), resume="auto")
        assert server.state.round == 1
        # exact: the checkpoint's weights read back
        np.testing.assert_array_equal(get_vector(server.team_model, server.layout, server.trainable), after_one)
        with pytest.raises(CheckpointError, match="server_state.json: damaged"):
            FederatedServer(build_config(FederatedConfig, data), resume=str(newest))
    finally:
        state.write_bytes(good)
    server = FederatedServer(build_config(FederatedConfig, data), resume=str(newest))
    assert server.state.round == 2
    # exact: the checkpoint's weights read back
    np.testing.assert_array_equal(get_vector(server.team_model, server.layout, server.trainable), after_two)

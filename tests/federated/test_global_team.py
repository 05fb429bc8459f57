"""A federated run is a run like any other: its sites train with the objective it names (GSPO
too), and its global team is what ``teamplay eval --checkpoint``, ``eval --team`` and
``teamplay export`` read from its folder.

The run: 2 sites, 1 round, in-process (``tests.federated.fakes.FakeGrid``): the real server and
``handle_train``, so each site rebuilds the run's config from the ``run_config`` the server sends.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from teamplay.agents.team_model import ADAPTER_WEIGHTS
from teamplay.cli import app
from teamplay.config import FederatedConfig, build_config
from teamplay.federated.server import FederatedServer
from teamplay.federated.wire import get_vector
from teamplay.serving.files.team_file import read_team_file
from teamplay.training.store.checkpoint import CheckpointError, list_checkpoints, load_checkpoint, resolve_adapters_dir
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
    assert not np.array_equal(before, after)  # exact: asserts a difference: the round moved the adapters


def _invoke(*args) -> object:
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result


def test_eval_checkpoint_and_team_read_the_global_team(gspo_run, tmp_path):
    # what the README's federated section shows: `teamplay eval ... --checkpoint runs/federated_demo`
    data, _, _ = gspo_run
    run, tiny = Path(data["output_dir"]), Path(data["model"]["name"])
    newest = list_checkpoints(run)[-1]
    assert resolve_adapters_dir(run) == newest / "adapters"  # what --checkpoint loads its adapters from
    for how in (["--checkpoint", run], ["--checkpoint", newest], ["--team", run]):
        out = tmp_path / f"eval-{len(list(tmp_path.iterdir()))}"
        _invoke("eval", *how, "--model", tiny, "--protocol", "single", "--task", "arith", "--limit", 1,
                "--max-new-tokens", 3, "-o", out)
        results = json.loads((out / "results.json").read_text())
        assert results["config"]["model"]["checkpoint"] == str(newest if how[0] == "--team" else how[1])


def test_export_writes_the_global_adapters(gspo_run, tmp_path):
    data, _, _ = gspo_run
    run = Path(data["output_dir"])
    newest = list_checkpoints(run)[-1]
    _invoke("export", run, "-o", tmp_path / "export")
    exported = read_team_file(tmp_path / "export")
    assert list(exported.adapters) == ["solver"]
    for name, entry in exported.adapters.items():
        mine = load_file(tmp_path / "export" / entry.path / ADAPTER_WEIGHTS)
        server = load_file(newest / "adapters" / name / ADAPTER_WEIGHTS)
        # exact: the export copies the server's tensors
        assert mine.keys() == server.keys() and all(torch.equal(mine[k], server[k]) for k in mine)
    # the adapters the round moved (LoRA B starts at zero): the export is not the untrained team
    assert any(k.endswith("lora_B.weight") and mine[k].abs().sum() > 0 for k in mine)


def test_a_trainer_resume_still_refuses_a_server_checkpoint(gspo_run):
    # a server checkpoint holds the global adapters, not a trainer's state: what eval and export
    # read from it is there, what a trainer resumes from is not
    data, _, _ = gspo_run
    newest = list_checkpoints(Path(data["output_dir"]))[-1]
    with pytest.raises(CheckpointError, match="trainer_state.json: missing"):
        load_checkpoint(newest)

"""A site's round is one call of its Trainer's ``train``: it holds the site folder's run lock while
it trains, logs its steps to the site's metrics.jsonl, and resumes from the checkpoint of the round
the server names, whatever rounds came after it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from teamplay.config import FederatedConfig, build_config
from teamplay.federated.client import RoundOrder, site_config, train_site
from teamplay.federated.server import FederatedServer
from teamplay.federated.wire import get_vector
from teamplay.training.run.trainer import Trainer
from teamplay.training.store.checkpoint import list_checkpoints, load_checkpoint
from teamplay.training.store.run_folder import RunFolderError, claim_run_folder
from tests.federated.fakes import tiny_config


@pytest.fixture
def federation(tmp_path):
    """A 2-site config of 2 local steps per round, and the global vector a round starts from."""
    cfg = build_config(FederatedConfig, tiny_config(tmp_path, clients=2, rounds=3, local_steps=2))
    server = FederatedServer(cfg)
    return cfg, get_vector(server.team_model, server.layout, server.trainable)


def steps_logged(folder) -> list[int]:
    return [json.loads(line)["step"] for line in (folder / "metrics.jsonl").read_text().splitlines()]


def test_a_round_logs_its_steps_and_resumes_the_round_it_is_told(tmp_path, federation):
    cfg, start = federation
    state_dir = tmp_path / "sites"
    folder = tmp_path / "sites" / "site-0"

    def round_(rnd: int, restore: int) -> None:
        update, metrics = train_site(cfg, 0, RoundOrder(rnd, restore, start.size, {}), start, state_dir)
        assert metrics["round"] == rnd and update.size == start.size

    round_(1, 0)
    assert steps_logged(folder) == [1, 2]
    round_(2, 1)
    assert steps_logged(folder) == [1, 2, 3, 4]
    # the server left round 2 out: round 3 starts from round 1's state, its log from round 1's lines
    round_(3, 1)
    assert steps_logged(folder) == [1, 2, 3, 4]
    assert [p.name for p in list_checkpoints(folder)] == ["step-000001", "step-000003"]
    saved = load_checkpoint(list_checkpoints(folder)[-1])
    assert saved.state.step == 4 and saved.extra["round"] == 3 and saved.tensors["residual"].shape == start.shape
    # the site's checkpoints are ordinary trainer checkpoints of its own config
    assert saved.config == site_config(cfg, 0, state_dir).model_dump(mode="json")


def test_a_site_holds_its_folder_while_it_trains(tmp_path, federation, monkeypatch):
    cfg, start = federation
    folder = tmp_path / "sites" / "site-1"
    refusals: list[str] = []
    real_step = Trainer.step

    def step(self):  # a second trainer on the site's folder, while the site trains
        with pytest.raises(RunFolderError, match="in use by another trainer") as info:
            claim_run_folder(folder, "auto", overwrite=False)
        refusals.append(str(info.value))
        return real_step(self)

    monkeypatch.setattr(Trainer, "step", step)
    train_site(cfg, 1, RoundOrder(1, 0, start.size, {}), start, tmp_path / "sites")
    assert len(refusals) == cfg.federated.local_steps
    claim_run_folder(folder, "auto", overwrite=False).release()  # free once the round is done
    assert np.isfinite(load_checkpoint(list_checkpoints(folder)[-1]).tensors["residual"].numpy()).all()

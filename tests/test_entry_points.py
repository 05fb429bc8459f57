"""Every entry point that trains builds its trainer through one composition root
(``teamplay.distributed.compose.make_trainer``), so ``model.device`` means the same everywhere.

On a machine whose torch sees no GPU, ``model.device: cuda`` must be refused with one line by
``teamplay train``, ``teamplay sweep``, the federated server and a federated site alike (a path
that wired its run by hand used to ignore the setting and train on the CPU). The Ray side
(``distributed:`` honoured by a sweep) is in ``tests/distributed/test_entry_points_ray.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from teamplay.cli import app
from teamplay.config import FederatedConfig, TrainConfig, build_config
from teamplay.distributed.compose import make_trainer, parts_for
from teamplay.errors import ConfigError
from teamplay.training.run.local_parts import LocalLearner, LocalRunner, local_parts
from tests.federated.fakes import tiny_config
from tests.training.test_sweep import sweep_config

runner = CliRunner()
NO_GPU = "model.device: cuda asked for, but this torch"
needs_no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")


def _config_with(tmp_path: Path, **sections) -> Path:
    config = sweep_config(tmp_path)
    data = json.loads(config.read_text())
    for key, value in sections.items():
        data[key] = {**data.get(key, {}), **value}
    config.write_text(json.dumps(data))
    return config


@needs_no_gpu
@pytest.mark.parametrize("command", [["train"], ["sweep", "--seeds", "0"]])
def test_train_and_sweep_refuse_a_gpu_torch_cannot_see(tmp_path, command):
    config = _config_with(tmp_path, model={"device": "cuda"})
    result = runner.invoke(app, [*command, "-c", str(config), "-o", str(tmp_path / "out")])
    assert result.exit_code != 0
    assert NO_GPU in result.output and "Traceback" not in result.output


@needs_no_gpu
def test_the_federated_server_refuses_a_gpu_torch_cannot_see(tmp_path):
    from teamplay.federated.server import FederatedServer

    data = tiny_config(tmp_path)
    FederatedServer(build_config(FederatedConfig, data))  # on the CPU: builds
    data["model"]["device"] = "cuda"
    data["output_dir"] = str(tmp_path / "run-cuda")
    with pytest.raises(ConfigError, match=NO_GPU):
        FederatedServer(build_config(FederatedConfig, data))


@needs_no_gpu
def test_a_federated_site_refuses_a_gpu_torch_cannot_see(tmp_path):
    from teamplay.federated.client import RoundOrder, train_site

    data = tiny_config(tmp_path)
    data["model"]["device"] = "cuda"
    order = RoundOrder(round=1, restore_round=0, entries=10, calibration={})
    with pytest.raises(ConfigError, match=NO_GPU):
        train_site(build_config(FederatedConfig, data), 0, order, np.zeros(1, dtype=np.float32), tmp_path / "sites")


def test_the_composition_root_picks_in_process_parts_without_distributed(tmp_path):
    config = _config_with(tmp_path)
    cfg = build_config(TrainConfig, json.loads(config.read_text()))
    assert parts_for(cfg.distributed) is local_parts
    trainer = make_trainer(cfg)
    assert isinstance(trainer.runner, LocalRunner) and isinstance(trainer.learner, LocalLearner)
    trainer.close()

from __future__ import annotations

import pytest

from tests.reliability.helpers import invoke, train_config
from tests.tiny import save_tiny


@pytest.fixture(scope="package")
def tiny_model(tmp_path_factory):
    return save_tiny(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="package")
def trained(tmp_path_factory, tiny_model):
    """(config, run folder) of a finished two-step run with checkpoints step-1 and step-2.
    Tests copy the run folder before changing it."""
    folder = tmp_path_factory.mktemp("trained")
    config = train_config(folder, tiny_model, folder / "run")
    result = invoke("train", "--config", config)
    assert result.exit_code == 0, result.output
    return config, folder / "run"

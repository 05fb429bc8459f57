"""``model.device``: where a single-process run trains; a GPU torch cannot see is a clear error.
Every kind of process that builds a team model places it by ``placement.model_device``."""

from __future__ import annotations

import pytest
import torch

from teamplay.config import DistributedConfig, ModelConfig, TrainConfig, build_config
from teamplay.errors import ConfigError
from teamplay.training.learn.update import _pad
from teamplay.training.wiring.placement import Placement, driver_placement, model_device, resolve_device


def test_auto_is_the_gpu_when_torch_sees_one(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu") and resolve_device("cpu") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("auto") == torch.device("cuda")
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(ConfigError, match="sees 2 GPU"):
        resolve_device("cuda:2")


def test_a_gpu_torch_cannot_see_is_refused_with_one_line(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match="sees no GPU; use model.device=auto or cpu"):
        resolve_device("cuda")


def test_bad_device_names_are_refused_at_load():
    with pytest.raises(ConfigError, match="model.device"):
        build_config(TrainConfig, {"model": {"device": "gpu"}})
    assert build_config(TrainConfig, {"model": {"device": "cuda:0"}}).model.device == "cuda:0"


def test_the_update_builds_its_tensors_where_the_log_probs_are():
    out = _pad([[1.0, 2.0], [3.0]], 3, torch.float32, "meta")
    assert out.device.type == "meta" and out.shape == (2, 3)
    assert _pad([[1.0, 2.0], [3.0]], 3, torch.float32).tolist() == [[1.0, 2.0, 0.0], [3.0, 0.0, 0.0]]


def test_each_kind_of_process_places_its_team_model_by_its_own_rule(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    model = ModelConfig(device="cuda:1")
    assert model_device(Placement.IN_PROCESS, model) == torch.device("cuda", 1)  # model.device
    assert model_device(Placement.CLUSTER_DRIVER, model) is None  # the GPUs are the workers'
    # a Ray actor: the GPU Ray gave it, whatever model.device says
    assert model_device(Placement.RAY_LEARNER, model) == torch.device("cuda")
    assert model_device(Placement.RAY_ROLLOUT, model) == torch.device("cuda")
    assert model_device(Placement.RAY_ROLLOUT, model, backend="vllm") is None  # vLLM loads its own copy
    assert model_device(Placement.RAY_ROLLOUT, model, backend="scripted") is None


def test_without_a_gpu_only_an_in_process_run_can_ask_for_one(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    model = ModelConfig(device="cuda")
    for where in (Placement.CLUSTER_DRIVER, Placement.RAY_LEARNER, Placement.RAY_ROLLOUT):
        assert model_device(where, model) is None
    assert model_device(Placement.IN_PROCESS, ModelConfig(device="auto")) == torch.device("cpu")
    with pytest.raises(ConfigError, match="sees no GPU"):
        model_device(Placement.IN_PROCESS, model)


def test_a_distributed_run_drives_from_the_cpu():
    assert driver_placement(None) is Placement.IN_PROCESS
    assert driver_placement(DistributedConfig()) is Placement.CLUSTER_DRIVER

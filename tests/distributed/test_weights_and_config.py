"""Adapter-only weight sync and the `distributed:` config rules (no Ray cluster needed)."""

from __future__ import annotations

import pytest
import torch

from teamplay.agents.roles import Role, Team
from teamplay.config import TrainConfig, build_config
from teamplay.distributed.weights import AdapterWeights, full_weight_bytes
from teamplay.errors import ConfigError
from tests.training.fixtures import tiny_team_model

TEAM = Team(roles=(Role(name="proposer"), Role(name="reviewer")))


def test_adapter_sync_bytes_by_hand_and_round_trip():
    tm = tiny_team_model(TEAM, r=4, alpha=8)
    weights = AdapterWeights.of(tm, version=3)
    # tiny llama: hidden 32, MLP 64, 4 heads of 8, 2 KV heads (k, v project to 16). LoRA r=4 on a
    # linear in->out has 4 * (in + out) parameters: q 4*(32+32)=256, k 4*(32+16)=192, v 192,
    # o 256, gate 4*(32+64)=384, up 384, down 384 -> 2048 per layer, x 2 layers = 4096 per adapter;
    # float32 -> 16,384 bytes per adapter, 32,768 for the two.
    assert weights.version == 3 and set(weights.tensors) == {"proposer", "reviewer"}
    assert weights.nbytes == 32_768
    assert full_weight_bytes(tm.model) == 4 * sum(p.numel() for p in tm.model.parameters())
    # the snapshot is a copy: changing the model does not change it, and applying it restores the model
    before = [p.detach().clone() for p in tm.adapter_parameters("reviewer")]
    with torch.no_grad():
        for p in tm.adapter_parameters("reviewer"):
            p.add_(1.0)
    weights.apply(tm)
    # exact: the snapshot is a copy, applied by copying
    assert all(torch.equal(a, b) for a, b in zip(before, tm.adapter_parameters("reviewer"), strict=True))


def test_distributed_section_rules():
    cfg = build_config(TrainConfig, {"distributed": {}})
    assert cfg.distributed.address == "local" and cfg.distributed.rollout_workers == 2
    assert build_config(TrainConfig, {}).distributed is None  # absent: the single-process path
    with pytest.raises(ConfigError, match="controllers.enabled"):
        build_config(TrainConfig, {"controllers": {"enabled": True}, "distributed": {}})
    with pytest.raises(ConfigError, match="objective.loss_agg"):
        build_config(TrainConfig, {"objective": {"loss_agg": "token_mean"}, "distributed": {"learner_workers": 2}})
    build_config(TrainConfig, {"objective": {"loss_agg": "token_mean"}, "distributed": {"learner_workers": 1}})
    with pytest.raises(ConfigError, match="distributed.rollout_workers"):
        build_config(TrainConfig, {"distributed": {"rollout_workers": 0}})
    with pytest.raises(ConfigError, match="distributed.engine"):
        build_config(TrainConfig, {"distributed": {"engine": "dask"}})


def test_a_checkpoint_resumes_with_or_without_ray_and_under_either_learner_strategy(tmp_path):
    from teamplay.training.store.resume import check_resumable

    single = build_config(TrainConfig, {"seed": 3}).model_dump(mode="json")
    fsdp = build_config(TrainConfig, {"seed": 3, "distributed": {"learner_workers": 2, "learner_strategy": "fsdp"}})
    ddp = fsdp.model_copy(update={"distributed": fsdp.distributed.model_copy(update={"learner_strategy": "ddp"})})
    for current, saved in [(single, fsdp.model_dump(mode="json")), (fsdp.model_dump(mode="json"), single),
                           (ddp.model_dump(mode="json"), fsdp.model_dump(mode="json"))]:
        check_resumable(current, saved, tmp_path)  # same checkpoint format: allowed
    with pytest.raises(ConfigError, match="--resume: seed is 4"):  # what it learns still may not change
        check_resumable(build_config(TrainConfig, {"seed": 4}).model_dump(mode="json"), fsdp.model_dump(mode="json"),
                        tmp_path)

"""A federated config refuses, at load and in one line, the TrainConfig fields a federated run has
no use for: the run's length, a token budget, controllers, and a ``distributed:`` section; it does
not have them (each site's Trainer gets a TrainConfig built from it)."""

from __future__ import annotations

import pytest

from teamplay.config import SINGLE_RUN_ONLY, FederatedConfig, build_config
from teamplay.errors import ConfigError
from teamplay.federated.client import site_config
from tests.federated.fakes import tiny_config


@pytest.mark.parametrize(("extra", "message"), [
    ({"steps": 7}, "steps/eval_every: not used by a federated run"),
    ({"eval_every": 2}, "steps/eval_every: not used by a federated run"),
    ({"token_budget": 1000}, "token_budget: a federated run's length"),
    ({"controllers": {"enabled": True}}, "controllers.enabled: learned speak/skip controllers"),
    ({"distributed": {"rollout_workers": 1}}, "distributed: a federated run's sites train in one process each"),
    ({"eval_samples": 4}, "eval_samples: the server evaluates the global team greedily"),
    ({"eval_withhold_messages": True}, "eval_withhold_messages: the server evaluates the global team"),
    ({"eval_self_consistency": True}, "eval_self_consistency: the server evaluates the global team"),
])
def test_fields_a_federated_run_cannot_use_are_refused_at_load(tmp_path, extra, message):
    data = {**tiny_config(tmp_path), **extra}
    with pytest.raises(ConfigError, match=message) as info:
        build_config(FederatedConfig, data)
    assert "\n" not in str(info.value)


def test_the_same_config_without_them_loads(tmp_path):
    cfg = build_config(FederatedConfig, tiny_config(tmp_path))
    # a federated config has none of them; each site's trainer gets its single-run config from it
    assert not set(SINGLE_RUN_ONLY) & set(FederatedConfig.model_fields)
    site = site_config(cfg, 0, tmp_path / "sites")
    assert site.steps == cfg.federated.rounds * cfg.federated.local_steps and site.distributed is None


@pytest.mark.parametrize(("extra", "field"), [({"tensorboard": True}, "tensorboard"),
                                              ({"wandb_project": "teams"}, "wandb_project")])
def test_logs_a_federated_run_does_not_write_are_refused_before_it_starts(tmp_path, extra, field):
    from teamplay.federated.server import FederatedServer

    # still a config (a run folder written before the refusal holds tensorboard: true), but no run
    cfg = build_config(FederatedConfig, {**tiny_config(tmp_path), **extra})
    with pytest.raises(ConfigError, match=f"^{field}: a federated run writes no TensorBoard or wandb logs") as info:
        FederatedServer(cfg)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "run").exists()


def test_a_federated_config_asks_for_no_tensorboard_by_default(tmp_path):
    data = {k: v for k, v in tiny_config(tmp_path).items() if k != "tensorboard"}
    cfg = build_config(FederatedConfig, data)
    assert cfg.tensorboard is False and cfg.wandb_project is None

"""Renamed config names: the new name loads, the old one loads for one release with exactly one
warning naming both, and both given is one error line (``teamplay.config.deprecated``,
``teamplay.errors.warn_renamed``)."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from teamplay.config import EvalConfig, TrainConfig, build_config
from teamplay.errors import ConfigError, DeprecatedNameWarning


def _load(data: dict, overrides: tuple[str, ...] = (), model: type = TrainConfig) -> tuple[Any, list[str]]:
    """The config (a ``model``) and the deprecation warnings loading it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = build_config(model, data, overrides)
    return cfg, [str(w.message) for w in caught if issubclass(w.category, DeprecatedNameWarning)]


def test_distributed_max_worker_lag_loads_without_a_warning():
    cfg, warned = _load({"distributed": {"max_worker_lag": 2}})
    assert cfg.distributed.max_worker_lag == 2
    assert warned == []


@pytest.mark.parametrize("data, overrides", [
    ({"distributed": {"max_staleness": 2}}, ()),
    ({"distributed": {}}, ("distributed.max_staleness=2",)),
])
def test_distributed_max_staleness_still_loads_with_one_warning(data, overrides):
    cfg, warned = _load(data, overrides)
    assert cfg.distributed.max_worker_lag == 2
    assert len(warned) == 1
    assert "distributed.max_staleness" in warned[0] and "distributed.max_worker_lag" in warned[0]
    assert "\n" not in warned[0]
    # the loaded config says the new name only: dumping and loading it again warns no more
    again, warned_again = _load(cfg.model_dump(mode="json"))
    assert again.distributed.max_worker_lag == 2 and warned_again == []


def test_distributed_old_and_new_key_together_is_one_error_line():
    with pytest.raises(ConfigError) as caught:
        build_config(TrainConfig, {"distributed": {"max_staleness": 1, "max_worker_lag": 1}})
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("distributed.max_staleness and distributed.max_worker_lag are given")


def test_truthful_policy_loads_without_a_warning():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = build_config(EvalConfig, {"backend": {"name": "scripted", "policy": "truthful"}})
        team = build_config(TrainConfig, {"team": {"roles": [{"name": "proposer", "policy": "scripted:truthful"},
                                                             {"name": "reviewer"}]}}).team
    assert cfg.backend.policy == "truthful" and team.scripted_roles() == {"proposer": "truthful"}
    assert not [w for w in caught if issubclass(w.category, DeprecatedNameWarning)]


@pytest.mark.parametrize("model, data, read", [
    (EvalConfig, {"backend": {"name": "scripted", "policy": "oracle"}}, lambda cfg: cfg.backend.policy),
    (TrainConfig, {"team": {"roles": [{"name": "proposer", "policy": "scripted:oracle"}, {"name": "reviewer"}]}},
     lambda cfg: cfg.team.scripted_roles()["proposer"]),
    (TrainConfig, {"warm_start": {"teachers": {"proposer": "oracle"}}},
     lambda cfg: cfg.warm_start.teachers["proposer"]),
], ids=["backend.policy", "team.roles.policy", "warm_start.teachers"])
def test_oracle_policy_still_loads_as_truthful_with_one_warning(model, data, read):
    cfg, warned = _load(data, model=model)
    assert read(cfg) == "truthful"
    assert len(warned) == 1
    assert "scripted policy 'oracle'" in warned[0] and "scripted policy 'truthful'" in warned[0]
    _, warned_again = _load(cfg.model_dump(mode="json"), model=model)  # the config keeps the new name
    assert warned_again == []


def test_oracle_policy_still_plays_as_truthful_with_one_warning():
    from teamplay.agents.backends.scripted import ScriptedBackend

    with pytest.warns(DeprecatedNameWarning) as caught:
        backend = ScriptedBackend("oracle")
    assert backend.policy_name == "truthful" and len(caught) == 1


def test_the_credit_method_oracle_keeps_its_name():
    cfg, warned = _load({"credit": {"method": "oracle", "options": {"form": "additive"}}})
    assert cfg.credit.method == "oracle" and warned == []

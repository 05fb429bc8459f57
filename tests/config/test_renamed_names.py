"""Renamed config names: the new name loads, the old one loads for one release with exactly one
warning naming both, and both given is one error line (``teamplay.config.deprecated``)."""

from __future__ import annotations

import warnings

import pytest

from teamplay.config import TrainConfig, build_config
from teamplay.config.deprecated import DeprecatedNameWarning
from teamplay.errors import ConfigError


def _load(data: dict, overrides: tuple[str, ...] = ()) -> tuple[TrainConfig, list[str]]:
    """The config and the deprecation warnings loading it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = build_config(TrainConfig, data, overrides)
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

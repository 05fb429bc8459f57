"""Resuming a run checkpointed by an older version: fields added since then take their defaults
(which keep the old behaviour) instead of counting as a config change; real changes still refuse."""

from __future__ import annotations

import pytest

from teamplay.config import TrainConfig, build_config
from teamplay.errors import ConfigError
from teamplay.training.store.resume import check_resumable, with_defaults


def _older(config: dict) -> dict:
    """``config`` as an older version wrote it: without fields added later (the loss options of the
    token-credit release, this release's budget, cache and device)."""
    old = {k: v for k, v in config.items() if k not in ("token_budget", "eval_cache")}
    old["model"] = {k: v for k, v in config["model"].items() if k != "device"}
    old["objective"] = {k: v for k, v in config["objective"].items() if k not in ("dual_clip", "kl_clamp")}
    return old


def test_an_older_checkpoints_config_resumes_and_real_changes_are_still_refused(tmp_path):
    current = build_config(TrainConfig, {"seed": 3}).model_dump(mode="json")
    saved = _older(current)
    with pytest.raises(ConfigError, match="objective.dual_clip"):  # compared as written, a new field differs
        check_resumable(current, saved, tmp_path)
    check_resumable(current, with_defaults(TrainConfig, saved, tmp_path), tmp_path)  # with its defaults: the same run
    changed = build_config(TrainConfig, {"seed": 4}).model_dump(mode="json")
    with pytest.raises(ConfigError, match="--resume: seed is 4"):
        check_resumable(changed, with_defaults(TrainConfig, saved, tmp_path), tmp_path)
    # where it trains is not what it learns
    check_resumable(build_config(TrainConfig, {"seed": 3, "model": {"device": "cpu"}}).model_dump(mode="json"),
                    with_defaults(TrainConfig, saved, tmp_path), tmp_path)


@pytest.mark.parametrize("bad", [{"retired_field": 1}, {"optim": {"lr": -1.0}}])
def test_a_checkpoint_config_that_no_longer_validates_is_one_config_error_line(tmp_path, bad):
    config = build_config(TrainConfig, {}).model_dump(mode="json")
    saved = {**config, **{k: {**config[k], **v} if isinstance(v, dict) else v for k, v in bad.items()}}
    field = "retired_field" if "retired_field" in bad else "optim.lr"
    with pytest.raises(ConfigError, match=f"--resume: the config of checkpoint .* does not validate .*{field}") as err:
        with_defaults(TrainConfig, saved, tmp_path)
    assert "\n" not in str(err.value)

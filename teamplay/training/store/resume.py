"""Which checkpoint a resumed run continues, and whether its config may continue it.

``--resume auto`` takes the newest intact checkpoint of the run folder (damaged ones are skipped
with a ``CheckpointWarning``); ``--resume PATH`` that folder. The checkpoint's config must equal
the run's own in every field that shapes what the run learns (``RESUMABLE_CHANGES`` lists those a
resumed run may change).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from teamplay.config import format_validation_error
from teamplay.errors import ConfigError, TeamplayWarning
from teamplay.training.store.checkpoint import (
    TRAINER_FILES,
    CheckpointError,
    LoadedCheckpoint,
    load_checkpoint,
    newest_intact_checkpoint,
)
from teamplay.training.store.record import RunRecord


class CheckpointWarning(TeamplayWarning):
    """A checkpoint was skipped on ``--resume auto`` because it is damaged; the message names the file."""


def resume_path(run_dir: Path, resume: str, required: Sequence[str] = TRAINER_FILES) -> Path | None:
    """The checkpoint folder ``resume`` names: "auto" the newest intact one of ``run_dir`` holding
    ``required`` (damaged ones skipped with a ``CheckpointWarning`` naming the bad file; None when
    there is none: a fresh run; every one damaged is a ``CheckpointError``), else that folder (not
    yet verified; a missing one is a ``ConfigError``)."""
    if resume != "auto":
        path = Path(resume)
        if not path.is_dir():
            raise ConfigError(f"--resume {resume}: no such checkpoint folder")
        return path
    path, damaged = newest_intact_checkpoint(run_dir, required)
    for exc in damaged:
        warnings.warn(CheckpointWarning(f"skipping damaged checkpoint: {exc}"), stacklevel=3)
    if path is None and damaged:
        raise CheckpointError(f"--resume auto: every checkpoint of {run_dir} is damaged "
                              f"({damaged[-1]}); start over with --overwrite")
    return path


def checkpoint_to_resume(record: RunRecord, resume: str) -> LoadedCheckpoint | None:
    """The checkpoint ``resume`` names in the run folder of ``record`` (``resume_path``), loaded and
    checked against the run's config (``record.config``); None when ``auto`` finds no checkpoint. A
    damaged explicit path or a config that differs from the checkpoint's in a field that shapes the
    run is a ``TeamplayError``."""
    path = resume_path(record.folder, resume)
    if path is None:
        return None
    data = load_checkpoint(path)
    check_resumable(dict(record.config), with_defaults(record.schema, data.config, path), path)
    return data


#: config fields a resumed run may change: how long it runs and what it logs, never what it learns
RESUMABLE_CHANGES = ("steps", "token_budget", "output_dir", "eval_cache", "eval_task", "eval_sampling", "eval_every",
                     "eval_curve_limit", "eval_samples",
                     "checkpoint_every", "keep_checkpoints", "log_episodes", "tensorboard", "wandb_project",
                     # where a finished warm start is shared, not what it trains
                     "warm_start.cache",
                     # when a run gives up on non-finite steps, not what it learns
                     "optim.max_nonfinite_steps",
                     # the checkpoint format is the same with or without Ray
                     "backend.max_batch", "model.checkpoint", "model.device", "distributed",
                     # how the vLLM engine schedules (each request carries its own seed)
                     "backend.engine")


def with_defaults(config_class: type[BaseModel], saved: dict[str, Any], path: Path) -> dict[str, Any]:
    """A checkpoint's config with the fields added since it was written at their defaults (a new
    field's default keeps the old behaviour), so a newer version resumes an older run. A config that
    no longer validates (a retired field, a value now refused) is one ``ConfigError`` line naming
    the checkpoint ``path`` and the fields, never a comparison of something the run cannot load."""
    try:
        return config_class.model_validate(saved).model_dump(mode="json")
    except ValidationError as exc:
        problems = "; ".join(format_validation_error(exc).splitlines())
        raise ConfigError(f"--resume: the config of checkpoint {path} does not validate ({problems}); "
                          "resume it with the version that wrote it or train into a new --output folder") from None


def check_resumable(current: dict[str, Any], saved: dict[str, Any], path: Path) -> None:
    """Raise ``ConfigError`` when ``current`` differs from the checkpoint's config in a field
    outside ``RESUMABLE_CHANGES`` (the team, model, LoRA, data, credit, loss, optimiser, seed...):
    the saved state would then mean something else, or not fit at all."""
    mine, theirs = _flatten_config(current), _flatten_config(saved)
    for key in sorted(set(mine) | set(theirs)):
        if any(key == f or key.startswith(f + ".") for f in RESUMABLE_CHANGES):
            continue
        if mine.get(key, "(absent)") != theirs.get(key, "(absent)"):
            raise ConfigError(f"--resume: {key} is {mine.get(key, '(absent)')!r} but checkpoint {path} was "
                              f"trained with {theirs.get(key, '(absent)')!r}; resume with the run's own config "
                              f"(its config.yaml) or train into a new --output folder")


def _flatten_config(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict) and data:
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(_flatten_config(value, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): data}

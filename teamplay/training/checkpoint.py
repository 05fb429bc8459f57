"""Atomic checkpoints that resume exactly.

Layout of ``RUN/checkpoints/step-000010/``:

    adapters/<name>/        each LoRA adapter in the standard PEFT format
                            (``PeftModel.from_pretrained(base, path)`` loads it)
    trainer_state.pt        optimizer, scheduler, step, data position, RNG states
    extra_state.json        credit / controller state (regret tables, ...), JSON
    config.yaml             the run's config

A checkpoint is written into a hidden temporary folder and renamed into place, so a kill at any
moment leaves either the previous complete checkpoint or the new complete one, never half of one.
Only the last ``keep`` checkpoints are kept.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

_STEP_DIR = re.compile(r"^step-(\d{6,})$")


@dataclass(frozen=True)
class TrainerState:
    """Everything besides weights that a resumed run needs to continue identically.

    Fields:
        step: steps completed.
        data_order: the permutation of training items of the current data epoch.
        data_cursor: position in ``data_order`` of the next problem.
        data_epoch: how many times the training items were exhausted.
    """

    step: int
    data_order: tuple[int, ...]
    data_cursor: int
    data_epoch: int


def rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def checkpoint_dir(run_dir: Path, step: int) -> Path:
    return run_dir / "checkpoints" / f"step-{step:06d}"


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first (temporary folders are ignored)."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and _STEP_DIR.match(p.name)]
    return sorted(found, key=lambda p: int(_STEP_DIR.match(p.name).group(1)))


def latest_checkpoint(run_dir: Path) -> Path | None:
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def save_checkpoint(run_dir: Path, state: TrainerState, team_model, optimizer, scheduler,
                    extra_state: dict[str, Any], config: dict[str, Any], keep: int) -> Path:
    """Write a checkpoint atomically (temp folder, then rename); prune to the last ``keep``."""
    final = checkpoint_dir(run_dir, state.step)
    tmp = final.parent / f".tmp-{final.name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    team_model.save_adapters(tmp / "adapters")
    torch.save({
        "state": state.__dict__, "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(), "rng": rng_state(),
    }, tmp / "trainer_state.pt")
    (tmp / "extra_state.json").write_text(json.dumps(extra_state), encoding="utf-8")
    (tmp / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    _fsync_tree(tmp)
    if final.exists():  # a previous run died after writing this step: replace it whole
        shutil.rmtree(final)
    os.replace(tmp, final)
    for old in list_checkpoints(run_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def resolve_checkpoint_dir(path: str | Path) -> Path:
    """A run folder's latest complete checkpoint, or ``path`` itself (a checkpoint or adapters folder).

    Raises ``ConfigError`` when the path does not exist or a run folder has no checkpoint yet.
    """
    from teamplay.errors import ConfigError

    path = Path(path)
    if not path.exists():
        raise ConfigError(f"checkpoint not found: {path}")
    if (path / "checkpoints").is_dir():
        latest = latest_checkpoint(path)
        if latest is None:
            raise ConfigError(f"run folder {path} has no complete checkpoint yet")
        return latest
    return path


def resolve_adapters_dir(path: str | Path) -> Path:
    """The adapters folder of a run folder (its latest checkpoint), a checkpoint, or itself.

    Raises ``ConfigError`` naming the path when none of these holds adapters.
    """
    from teamplay.errors import ConfigError

    path = resolve_checkpoint_dir(path)
    if (path / "adapters").is_dir():
        path = path / "adapters"
    if not any(child.is_dir() and (child / "adapter_config.json").is_file() for child in path.iterdir()):
        raise ConfigError(f"{path} holds no LoRA adapters (expected a run folder, a checkpoint folder "
                          f"or an adapters folder with one PEFT adapter per role)")
    return path


def load_trainer_state(path: Path) -> dict[str, Any]:
    """The raw trainer state of a checkpoint (optimizer/scheduler state dicts, RNG, TrainerState)."""
    data = torch.load(Path(path) / "trainer_state.pt", weights_only=False)
    data["state"] = TrainerState(**{k: (tuple(v) if k == "data_order" else v) for k, v in data["state"].items()})
    extra = Path(path) / "extra_state.json"
    data["extra"] = json.loads(extra.read_text(encoding="utf-8")) if extra.exists() else {}
    return data


def _fsync_tree(root: Path) -> None:
    for path in root.rglob("*"):
        if path.is_file():
            with path.open("rb") as f:
                os.fsync(f.fileno())

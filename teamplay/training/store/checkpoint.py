"""Atomic, verified checkpoints that resume exactly and never run code when read.

Layout of ``RUN/checkpoints/step-000010/``:

    adapters/<name>/        each LoRA adapter in the standard PEFT format (safetensors + JSON;
                            ``PeftModel.from_pretrained(base, path)`` loads it)
    trainer_state.json      step, data position, scheduler, optimizer hyper-parameters, the
                            Python and NumPy RNG states: plain JSON
    trainer_tensors.safetensors   optimizer moment tensors and the torch RNG state
    extra_state.json        credit / controller state (regret tables, ...), JSON
    config.yaml             the run's config
    manifest.json           size and SHA-256 of every file above, written last

A federated server's checkpoint (``teamplay.federated.server``) has the same format with other
files: the global adapters, ``config.yaml`` and the strategy's ``server_state.json``. What reads a
checkpoint's team (``eval --checkpoint``, ``export``, ``--team``) takes either kind
(``resolve_checkpoint_dir``); a trainer resumes only from a trainer's (``load_checkpoint``).

Nothing in a checkpoint is a pickle: JSON and safetensors cannot carry code, so reading a
checkpoint someone else supplied cannot run theirs. A folder that still holds the pickled
``trainer_state.pt`` of older versions is refused, never unpickled.

A checkpoint is written into a hidden staging folder (``.tmp-step-N-...``, ``atomic.staged_folder``)
and renamed into place, so a kill at any moment leaves either the previous complete checkpoint or the new complete
one, never half of one; the next start of the run removes such leftovers (and puts back a
checkpoint that a replacing save had moved aside when it was killed: ``remove_stale_temporaries``).
Before a checkpoint is used, ``verify_checkpoint`` compares every file with the manifest, so a
truncated or corrupted file is reported by name (``CheckpointError``) instead of failing deep inside
torch. Only the last ``keep`` checkpoints are kept.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import re
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from teamplay.atomic import recover_folders, staged_folder
from teamplay.errors import ConfigError, TeamplayError
from teamplay.json_files import read_json

_STEP_DIR = re.compile(r"^step-(\d{6,})$")
MANIFEST = "manifest.json"
STATE_JSON = "trainer_state.json"
STATE_TENSORS = "trainer_tensors.safetensors"
EXTRA_JSON = "extra_state.json"
CONFIG_YAML = "config.yaml"
#: the prefix of the extra tensors' names in STATE_TENSORS
EXTRA_TENSOR = "extra."
#: the files every trainer checkpoint holds (besides its adapters and manifest)
TRAINER_FILES = (STATE_JSON, STATE_TENSORS, CONFIG_YAML)
#: the files every checkpoint holds, a trainer's or a federated server's (besides its adapters and
#: manifest): what reading its team needs (the config describes the team the adapters belong to)
TEAM_FILES = (CONFIG_YAML,)
#: the pickled trainer state of older versions: never loaded (a pickle can run code)
LEGACY_PICKLE = "trainer_state.pt"
FORMAT_VERSION = 1


class CheckpointError(TeamplayError):
    """A checkpoint is missing, damaged or not in teamplay's format; the message names the file."""


@dataclass(frozen=True)
class TrainerState:
    """Everything besides weights that a resumed run needs to continue identically.

    Fields:
        step: steps completed.
        data_order: the permutation of training items of the current data epoch.
        data_cursor: position in ``data_order`` of the next problem.
        data_epoch: how many times the training items were exhausted.
        generated_tokens: tokens the run has generated so far, its episodes' and the
            counterfactual ones (``generated_tokens`` in ``teamplay.training.store.metrics``): what
            ``token_budget`` is spent against.
    """

    step: int
    data_order: tuple[int, ...]
    data_cursor: int
    data_epoch: int
    generated_tokens: int = 0


@dataclass(frozen=True)
class LoadedCheckpoint:
    """A verified checkpoint read back: plain state dicts ready for ``load_state_dict``.

    Fields:
        path: the checkpoint folder.
        state: the trainer's data position and step.
        optimizer, scheduler: ``state_dict()`` of each, tensors included.
        rng: Python / NumPy / torch generator states (``set_rng_state`` restores them).
        extra: ``extra_state.json`` (controller tables, ...).
        config: the run config the checkpoint was written with (``config.yaml``).
        tensors: the extra tensors saved with it (``save_checkpoint(extra_tensors=...)``), by name.
    """

    path: Path
    state: TrainerState
    optimizer: dict[str, Any]
    scheduler: dict[str, Any]
    rng: dict[str, Any]
    extra: dict[str, Any]
    config: dict[str, Any]
    tensors: dict[str, torch.Tensor] = dataclasses.field(default_factory=dict)


# ------------------------------------------------------------------------------------- RNG
def rng_state() -> dict[str, Any]:
    """The global generators' states as plain data (lists and a uint8 tensor)."""
    version, internal, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return {"python": [version, list(internal), gauss],
            "numpy": [name, [int(k) for k in keys], int(pos), int(has_gauss), float(cached)],
            "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])


# ------------------------------------------------------------------------------- locations
def checkpoint_dir(run_dir: Path, step: int) -> Path:
    return run_dir / "checkpoints" / f"step-{step:06d}"


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Renamed-into-place checkpoints of a run, oldest first (temporary folders are ignored)."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and _STEP_DIR.match(p.name)]
    return sorted(found, key=step_of)


def step_of(folder: Path) -> int:
    """The step a checkpoint folder (``step-000012``, as ``checkpoint_dir`` names it) holds; a
    ValueError for any other name."""
    match = _STEP_DIR.match(Path(folder).name)
    if match is None:
        raise ValueError(f"{folder} is not a checkpoint folder name (step-NNNNNN)")
    return int(match.group(1))


def latest_checkpoint(run_dir: Path) -> Path | None:
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def remove_stale_temporaries(run_dir: Path) -> list[Path]:
    """Clean up after saves that never finished; returns the leftovers it deleted.

    - ``.tmp-step-*`` (a save killed while writing) is deleted;
    - ``.old-step-N-PID`` (a save that replaced ``step-N`` and was killed before it deleted the old
      folder) is deleted when ``step-N`` is in place, and renamed back to ``step-N`` when it is not
      (``atomic.recover_folders``).

    Call it only while holding the run folder's lock: a running save owns its staging folder.
    """
    return recover_folders(Path(run_dir) / "checkpoints", lambda name: _STEP_DIR.match(name) is not None)


# -------------------------------------------------------------------------------------- save
def save_checkpoint(run_dir: Path, state: TrainerState, team_model, optimizer, scheduler,
                    extra_state: dict[str, Any], config: dict[str, Any], keep: int | None,
                    extra_tensors: dict[str, torch.Tensor] | None = None, number: int | None = None) -> Path:
    """Write a checkpoint atomically (temp folder, manifest, rename); prune to the last ``keep``
    (None: keep every one). ``extra_tensors`` are saved beside the optimiser state (read back as
    ``LoadedCheckpoint.tensors``); ``number`` names the folder (default ``state.step``; a federated
    site numbers its checkpoints by round).

    A failed write (disk full, read-only folder) removes its temporary folder and raises
    ``CheckpointError``; earlier checkpoints are untouched (pruning runs only after the rename).
    """

    def fill(folder: Path) -> None:
        team_model.save_adapters(folder / "adapters")
        meta, tensors = _split_trainer_state(state, optimizer.state_dict(), scheduler.state_dict(), rng_state())
        tensors.update({f"{EXTRA_TENSOR}{name}": t.detach().contiguous().cpu()
                        for name, t in (extra_tensors or {}).items()})
        save_file(tensors, folder / STATE_TENSORS)
        (folder / STATE_JSON).write_text(json.dumps(meta), encoding="utf-8")
        (folder / EXTRA_JSON).write_text(json.dumps(extra_state), encoding="utf-8")
        (folder / CONFIG_YAML).write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")

    return write_checkpoint(run_dir, state.step if number is None else number, fill, keep)


def write_checkpoint(run_dir: Path, step: int, fill: Callable[[Path], None], keep: int | None) -> Path:
    """The one way a checkpoint folder is written (the trainer's, the federated server's):
    ``fill(folder)`` writes the files into a temporary folder, ``manifest.json`` records the size
    and SHA-256 of each, and the folder replaces ``checkpoints/step-<step>`` whole; then the run
    keeps its last ``keep`` checkpoints (None: every one).

    A failed write (disk full, read-only folder) removes its staging folder and raises
    ``CheckpointError``; earlier checkpoints are untouched (pruning runs only after the rename).
    """
    final = checkpoint_dir(run_dir, step)
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        # a previous run that died after writing this step left a folder here: it is replaced whole
        with staged_folder(final) as tmp:
            fill(tmp)
            write_manifest(tmp, step)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise CheckpointError(f"could not write checkpoint {final}: {reason}"
                              f"{f' ({exc.filename})' if exc.filename else ''}; earlier checkpoints "
                              f"are intact") from None
    for old in list_checkpoints(run_dir)[:-keep] if keep is not None else ():
        shutil.rmtree(old, ignore_errors=True)
    return final


def _split_trainer_state(state: TrainerState, optimizer: dict[str, Any], scheduler: dict[str, Any],
                         rng: dict[str, Any]) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """The trainer state as (JSON-able metadata, named tensors for safetensors).

    Optimizer state entry ``optimizer.state[p][k]`` becomes tensor ``optimizer.<p>.<k>`` when it is
    a tensor and stays in the JSON otherwise.
    """
    tensors: dict[str, torch.Tensor] = {"rng.torch": rng["torch"].contiguous()}
    opt_state: dict[str, dict[str, Any]] = {}
    for pid, entries in optimizer["state"].items():
        opt_state[str(pid)] = {}
        for key, value in entries.items():
            if isinstance(value, torch.Tensor):
                tensors[f"optimizer.{pid}.{key}"] = value.detach().contiguous().cpu()
                opt_state[str(pid)][key] = {"tensor": f"optimizer.{pid}.{key}"}
            else:
                opt_state[str(pid)][key] = {"value": value}
    meta = {"format": FORMAT_VERSION,
            "state": {**state.__dict__, "data_order": list(state.data_order)},
            "optimizer": {"param_groups": optimizer["param_groups"], "state": opt_state},
            "scheduler": scheduler,
            "rng": {"python": rng["python"], "numpy": rng["numpy"]}}
    return meta, tensors


def write_manifest(folder: Path, step: int) -> None:
    """``manifest.json``: size and SHA-256 of every file under ``folder``."""
    files = {p.relative_to(folder).as_posix(): {"bytes": p.stat().st_size, "sha256": _sha256(p)}
             for p in sorted(folder.rglob("*")) if p.is_file() and p.name != MANIFEST}
    (folder / MANIFEST).write_text(json.dumps({"format": FORMAT_VERSION, "step": step, "files": files},
                                              indent=1), encoding="utf-8")


# -------------------------------------------------------------------------------------- load
def verify_checkpoint(path: Path, required: Sequence[str] = TRAINER_FILES) -> None:
    """Raise ``CheckpointError`` naming the first file of ``path`` that is missing or damaged.

    A file is damaged when its size or SHA-256 differs from ``manifest.json``; a checkpoint
    without a readable manifest is not a teamplay checkpoint (or one of an older version).
    ``required``: the files the checkpoint must hold (a trainer's by default).
    """
    path = Path(path)
    manifest = path / MANIFEST
    if not manifest.is_file():
        if (path / LEGACY_PICKLE).exists():
            raise CheckpointError(f"{path / LEGACY_PICKLE}: a pickled trainer state of an older teamplay "
                                  f"version; it is not loaded, because unpickling a file can run code. "
                                  f"Start a new run (or evaluate its adapters with --checkpoint)")
        raise CheckpointError(f"{path} is not a teamplay checkpoint (no {MANIFEST})")
    saved = read_json(manifest, CheckpointError)
    try:
        files = saved["files"]
        listed = [(str(name), int(entry["bytes"]), str(entry["sha256"])) for name, entry in files.items()]
    except (ValueError, KeyError, TypeError, AttributeError):
        raise CheckpointError(f"{manifest}: damaged manifest (not the JSON teamplay writes)") from None
    for name, size, digest in listed:
        file = path / name
        if ".." in Path(name).parts or not file.is_file():
            raise CheckpointError(f"{file}: missing from the checkpoint (listed in {MANIFEST})")
        if file.stat().st_size != size:
            raise CheckpointError(f"{file}: damaged ({file.stat().st_size} bytes, {size} when saved)")
        if _sha256(file) != digest:
            raise CheckpointError(f"{file}: damaged (its checksum differs from the one saved in {MANIFEST})")
    for name in required:
        if name not in files:
            raise CheckpointError(f"{path / name}: missing from the checkpoint")


def load_checkpoint(path: Path) -> LoadedCheckpoint:
    """Verify ``path`` and read its trainer state, extra state and config (never unpickles).

    Raises ``CheckpointError`` naming the file that is missing, damaged or malformed.
    """
    path = Path(path)
    verify_checkpoint(path)
    meta = read_json(path / STATE_JSON, CheckpointError)
    extra = read_json(path / EXTRA_JSON, CheckpointError) if (path / EXTRA_JSON).is_file() else {}
    try:
        tensors = load_file(path / STATE_TENSORS)
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(f"{path / STATE_TENSORS}: not a readable safetensors file ({exc})") from None
    try:
        config = yaml.safe_load((path / CONFIG_YAML).read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path / CONFIG_YAML}: not valid YAML ({exc})") from None
    try:
        raw = meta["state"]
        state = TrainerState(step=int(raw["step"]), data_order=tuple(int(i) for i in raw["data_order"]),
                             data_cursor=int(raw["data_cursor"]), data_epoch=int(raw["data_epoch"]),
                             generated_tokens=int(raw.get("generated_tokens", 0)))  # absent before budgets
        opt_state = {int(pid): {key: tensors[entry["tensor"]] if "tensor" in entry else entry["value"]
                                for key, entry in entries.items()}
                     for pid, entries in meta["optimizer"]["state"].items()}
        optimizer = {"state": opt_state, "param_groups": meta["optimizer"]["param_groups"]}
        rng = {**meta["rng"], "torch": tensors["rng.torch"]}
        scheduler = meta["scheduler"]
        saved = {name.removeprefix(EXTRA_TENSOR): t for name, t in tensors.items() if name.startswith(EXTRA_TENSOR)}
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CheckpointError(f"{path / STATE_JSON}: malformed trainer state (field {exc})") from None
    if not isinstance(extra, dict) or not isinstance(config, dict):
        raise CheckpointError(f"{path}: {EXTRA_JSON} and {CONFIG_YAML} must each hold a mapping")
    return LoadedCheckpoint(path, state, optimizer, scheduler, rng, extra, config, saved)


def newest_intact_checkpoint(run_dir: Path, required: Sequence[str] = TRAINER_FILES
                             ) -> tuple[Path | None, list[CheckpointError]]:
    """The newest checkpoint of ``run_dir`` that verifies (holding ``required``), and the errors of
    newer damaged ones."""
    damaged: list[CheckpointError] = []
    for path in reversed(list_checkpoints(run_dir)):
        try:
            verify_checkpoint(path, required)
        except CheckpointError as exc:
            damaged.append(exc)
            continue
        return path, damaged
    return None, damaged


def resolve_checkpoint_dir(path: str | Path) -> Path:
    """A run folder's latest checkpoint, or ``path`` itself (a checkpoint or adapters folder):
    where ``eval --checkpoint``, ``export`` and ``--team`` read a team from.

    A checkpoint (anything with a manifest or a trainer state) is verified first: every file its
    manifest lists, and ``TEAM_FILES``, so a federated server's checkpoint (no trainer state) is
    read like a trainer's. Raises ``ConfigError`` when the path does not exist or a run folder has
    no checkpoint yet, and ``CheckpointError`` naming the damaged file.
    """
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"checkpoint not found: {path}")
    if (path / "checkpoints").is_dir():
        latest = latest_checkpoint(path)
        if latest is None:
            raise ConfigError(f"run folder {path} has no complete checkpoint yet")
        path = latest
    if any((path / name).exists() for name in (MANIFEST, STATE_JSON, STATE_TENSORS)):
        verify_checkpoint(path, TEAM_FILES)
    return path


def resolve_adapters_dir(path: str | Path) -> Path:
    """The adapters folder of a run folder (its latest checkpoint), a checkpoint, or itself.

    Raises ``ConfigError`` naming the path when none of these holds adapters.
    """
    path = resolve_checkpoint_dir(path)
    if (path / "adapters").is_dir():
        path = path / "adapters"
    if not path.is_dir() or not any(child.is_dir() and (child / "adapter_config.json").is_file()
                                    for child in path.iterdir()):
        raise ConfigError(f"{path} holds no LoRA adapters (expected a run folder, a checkpoint folder "
                          f"or an adapters folder with one PEFT adapter per role)")
    return path


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()

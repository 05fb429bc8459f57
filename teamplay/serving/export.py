"""A trained team as a folder that works without teamplay's run: ``teamplay export RUN -o DIR``.

    DIR/adapters/<name>/   adapter_config.json + adapter_model.safetensors per adapter: the
                           standard PEFT layout (PeftModel.from_pretrained, a vLLM LoRARequest)
    DIR/team.yaml          how the adapters make a team (teamplay.serving.team_file)
    DIR/README.md          a model card: Hub metadata, held-out results, training config, credit
    DIR/bundled/           a protocol or task file the run named by path (only then)

``load_team_config`` is the one reader: it turns an export folder or a run folder into the
``EvalConfig`` that ``teamplay eval --team``, ``play --team`` and ``serve`` evaluate.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from teamplay.config import EvalConfig, FederatedConfig, TrainConfig, build_config, read_yaml
from teamplay.errors import ConfigError
from teamplay.serving.team_file import read_team_file
from teamplay.training.setup import EXPORT_TEAM_FILE

_STEP = re.compile(r"^step-(\d+)$")


@dataclass(frozen=True)
class RunSource:
    """Where a run's exported pieces come from.

    Fields:
        checkpoint: the checkpoint folder (verified) whose adapters and controller tables are used.
        run_dir: the run folder (its metrics.jsonl), or None for a checkpoint outside one.
        config: the training config the checkpoint was written with.
        step: the checkpoint's step (round of a federated run), or None when its name has none.
    """

    checkpoint: Path
    run_dir: Path | None
    config: TrainConfig
    step: int | None


def load_team_config(path: Path, overrides: list[str] | None = None) -> EvalConfig:
    """The ``EvalConfig`` of a team folder, ready for ``build_eval_team``.

    ``path`` is an export (has ``team.yaml``; the adapters and controller tables load from it, the
    run need not exist), a run folder (its latest checkpoint) or one of its checkpoint folders.
    A run's team is evaluated as its held-out evaluation ran: ``eval_task`` (else ``task``),
    ``eval_sampling``, its model, team, protocol and controllers. ``overrides`` are ``--set``
    strings applied on top. Raises ConfigError (one line) for anything else.
    """
    path = Path(path)
    if (path / EXPORT_TEAM_FILE).is_file():
        data = read_team_file(path).eval_data(path)
    else:
        source = find_run(path)
        data = run_eval_data(source.config, source.checkpoint)
    return build_config(EvalConfig, data, overrides or [])


def run_eval_data(cfg: TrainConfig, checkpoint: Path) -> dict:
    """The sections of an ``EvalConfig`` that evaluates ``checkpoint`` of a run with config ``cfg``."""
    return {
        "task": (cfg.eval_task or cfg.task).model_dump(mode="json"),
        "protocol": cfg.protocol.model_dump(mode="json"),
        "team": cfg.team.model_dump(mode="json", exclude_none=True) if cfg.team is not None else None,
        "model": {**cfg.model.model_dump(mode="json"), "checkpoint": str(checkpoint)},
        "controllers": cfg.controllers.model_dump(mode="json"),
        "backend": cfg.backend.model_dump(mode="json"),
        "sampling": cfg.eval_sampling.model_dump(mode="json"),
        "seed": cfg.seed,
    }


def find_run(path: Path) -> RunSource:
    """The checkpoint, run folder and training config of a run folder (its latest checkpoint) or of
    one checkpoint folder; ConfigError when ``path`` is neither, CheckpointError naming a damaged file."""
    from teamplay.training.checkpoint import CONFIG_YAML, resolve_checkpoint_dir

    path = Path(path)
    if not path.is_dir():
        raise ConfigError(f"{path}: no such folder; expected a run folder (teamplay train -o), one of its "
                          f"checkpoints/step-N folders, or an export (teamplay export -o)")
    if (path / "checkpoints").is_dir():
        checkpoint, run_dir = resolve_checkpoint_dir(path), path
    elif (path / "adapters").is_dir() and (path / CONFIG_YAML).is_file():
        checkpoint = resolve_checkpoint_dir(path)
        run_dir = path.parent.parent if path.parent.name == "checkpoints" else None
    elif (path / CONFIG_YAML).is_file():
        raise ConfigError(f"run folder {path} has no checkpoint yet; train it (or let it reach "
                          f"checkpoint_every) first")
    else:
        raise ConfigError(f"{path} is not a run folder (no checkpoints/ or config.yaml), a checkpoint folder "
                          f"or an export (no {EXPORT_TEAM_FILE})")
    config_file = checkpoint / CONFIG_YAML if (checkpoint / CONFIG_YAML).is_file() else run_dir / CONFIG_YAML
    match = _STEP.match(checkpoint.name)
    return RunSource(checkpoint=checkpoint, run_dir=run_dir, config=_train_config(config_file),
                     step=int(match.group(1)) if match else None)


def _train_config(path: Path) -> TrainConfig:
    if not path.is_file():
        raise ConfigError(f"{path}: missing; the run's training config is needed to describe its team")
    data = read_yaml(path)
    try:
        return build_config(FederatedConfig if "federated" in data else TrainConfig, data)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None

"""The speak/skip controllers of an evaluation, their learned tables read from a checkpoint or an
exported team (``load_controllers``)."""

from __future__ import annotations

from pathlib import Path

from teamplay.config import ControllerConfig, read_yaml
from teamplay.errors import ConfigError
from teamplay.json_files import read_json
from teamplay.training.play.controllers import TeamControllers

#: the file of an exported team (``teamplay export``, ``teamplay.serving.files.export``) that describes it;
#: its ``controllers.tables`` hold the learned speak/skip tables
EXPORT_TEAM_FILE = "team.yaml"


def load_controllers(cfg: ControllerConfig, checkpoint: str | Path | None) -> TeamControllers:
    """Controllers for evaluation, their tables read from ``checkpoint``'s ``extra_state.json``.

    ``checkpoint`` is a run folder (its latest checkpoint is used), a checkpoint folder, or an
    exported team (``teamplay export``: the tables are in its ``team.yaml``). Tables are required
    unless ``cfg.mode`` is ``always_speak``: evaluating learned controllers without their tables
    would silently evaluate an always-speaking team.
    """
    from teamplay.training.store.checkpoint import EXTRA_JSON, resolve_checkpoint_dir

    controllers = TeamControllers(cfg)
    if checkpoint is None:
        if cfg.mode != "always_speak":
            raise ConfigError(f"controllers.mode={cfg.mode!r} needs learned tables: pass --checkpoint RUN "
                              f"(a run trained with controllers.enabled), or use mode always_speak")
        return controllers
    path = resolve_checkpoint_dir(checkpoint)
    if (path / EXPORT_TEAM_FILE).is_file():
        return _export_controllers(controllers, path / EXPORT_TEAM_FILE)
    extra = path / EXTRA_JSON
    if not extra.is_file():
        raise ConfigError(f"controllers: {path} is not a checkpoint folder (no {EXTRA_JSON}); pass a "
                          f"run folder or one of its checkpoints/step-N folders")
    data = read_json(extra, ConfigError, context="controllers")
    if "controllers" not in data:
        raise ConfigError(f"controllers.enabled: checkpoint {path} has no controller tables (the run was "
                          f"trained without controllers); set controllers.enabled=false")
    try:
        controllers.load_state_dict(data["controllers"])
    except ValueError as exc:
        raise ConfigError(f"controllers: {extra}: {exc}") from None
    return controllers


def _export_controllers(controllers: TeamControllers, team_file: Path) -> TeamControllers:
    """``controllers`` with the tables of an exported team's ``team.yaml`` (``controllers.tables``)."""
    section = read_yaml(team_file).get("controllers")
    if not isinstance(section, dict) or "tables" not in section:
        raise ConfigError(f"controllers.enabled: the exported team {team_file.parent} has no controller tables "
                          f"(its run was trained without controllers); set controllers.enabled=false")
    try:
        controllers.load_state_dict({"tables": section["tables"]})
    except ValueError as exc:
        raise ConfigError(f"controllers: {team_file}: {exc}") from None
    return controllers

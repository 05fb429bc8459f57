"""A trained team as a folder that works without teamplay's run: ``teamplay export RUN -o DIR``.

    DIR/adapters/<name>/   adapter_config.json + adapter_model.safetensors per adapter: the
                           standard PEFT layout (PeftModel.from_pretrained, a vLLM LoRARequest)
    DIR/team.yaml          how the adapters make a team (teamplay.serving.files.team_file)
    DIR/README.md          a model card: Hub metadata, held-out results, training config, credit
    DIR/bundled/           a protocol or task file the run named by path (only then)

``load_team_config`` is the one reader: it turns an export folder or a run folder into the
``EvalConfig`` that ``teamplay eval --team``, ``play --team`` and ``serve`` evaluate.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from teamplay.agents.roles import Team
from teamplay.agents.team_model import ADAPTER_CONFIG, ADAPTER_WEIGHTS
from teamplay.atomic import replace_folder
from teamplay.config import EvalConfig, FederatedConfig, TeamTrainingConfig, TrainConfig, build_config, read_yaml
from teamplay.errors import ConfigError, TeamplayError
from teamplay.serving.files.card import default_license, hub_id, model_card
from teamplay.serving.files.team_file import (
    ADAPTERS_DIR,
    AdapterEntry,
    ExportedControllers,
    TeamFile,
    TeamTask,
    bundled_name,
    read_team_file,
    spec_file,
)
from teamplay.training.wiring.controllers import EXPORT_TEAM_FILE


@dataclass(frozen=True)
class RunSource:
    """Where a run's exported pieces come from.

    Fields:
        checkpoint: the checkpoint folder (verified) whose adapters and controller tables are used.
        run_dir: the run folder (its metrics.jsonl), or None for a checkpoint outside one.
        config: the training config the checkpoint was written with (a ``TrainConfig``, or the
            ``FederatedConfig`` of a federated run's global team).
        step: the checkpoint's step (round of a federated run), or None when its name has none.
    """

    checkpoint: Path
    run_dir: Path | None
    config: TeamTrainingConfig
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


def run_eval_data(cfg: TeamTrainingConfig, checkpoint: Path) -> dict:
    """The sections of an ``EvalConfig`` that evaluates ``checkpoint`` of a run with config ``cfg``."""
    data = {
        "task": (cfg.eval_task or cfg.task).model_dump(mode="json"),
        "protocol": cfg.protocol.model_dump(mode="json"),
        "team": cfg.team.model_dump(mode="json", exclude_none=True) if cfg.team is not None else None,
        "model": {**cfg.model.model_dump(mode="json"), "checkpoint": str(checkpoint)},
        "backend": cfg.backend.model_dump(mode="json"),
        "sampling": cfg.eval_sampling.model_dump(mode="json"),
        "seed": cfg.seed,
    }
    if isinstance(cfg, TrainConfig):  # a federated run has no controllers
        data["controllers"] = cfg.controllers.model_dump(mode="json")
    return data


def find_run(path: Path) -> RunSource:
    """The checkpoint, run folder and training config of a run folder (its latest checkpoint) or of
    one checkpoint folder; ConfigError when ``path`` is neither, CheckpointError naming a damaged file."""
    from teamplay.training.store.checkpoint import CONFIG_YAML, resolve_checkpoint_dir, step_of

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
    try:
        step = step_of(checkpoint)
    except ValueError:  # a checkpoint folder under another name (copied, renamed): no step to report
        step = None
    return RunSource(checkpoint=checkpoint, run_dir=run_dir, config=_train_config(config_file), step=step)


def _train_config(path: Path) -> TeamTrainingConfig:
    if not path.is_file():
        raise ConfigError(f"{path}: missing; the run's training config is needed to describe its team")
    data = read_yaml(path)
    try:
        return build_config(FederatedConfig if "federated" in data else TrainConfig, data)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


# ------------------------------------------------------------------------------------- export
def export_team(run: Path, out: Path, *, force: bool = False, license: str | None = None) -> Path:
    """Write the team of ``run`` (a run folder: its latest checkpoint; or one checkpoint folder) to
    ``out`` as adapters, ``team.yaml`` and a model card (see the module docstring); returns ``out``.

    ``license`` is the card's Hub license id (default: the base model's where teamplay knows it,
    else ``other``). Refused with a ConfigError before anything is written: ``run`` is not a run or
    checkpoint folder (or is an export already), its checkpoint lacks an adapter of the team, or
    ``out`` is a file, a folder that is not empty (unless ``force``: it is then replaced whole), or
    holds the run. The export is written beside ``out`` and renamed into place, so a failure
    (a full disk) leaves ``out`` as it was.
    """
    from teamplay.training.store.checkpoint import resolve_adapters_dir

    run, out = Path(run), Path(out)
    if (run / EXPORT_TEAM_FILE).is_file():
        raise ConfigError(f"{run} is an export already (it has {EXPORT_TEAM_FILE}); export a run folder, or "
                          f"copy this folder as it is")
    source = find_run(run)
    _check_output(out, run, force)
    adapters = resolve_adapters_dir(source.checkpoint)
    team = describe_team(source)
    missing = sorted(name for name in team.adapters if not (adapters / name / ADAPTER_CONFIG).is_file())
    if missing:
        raise ConfigError(f"{adapters} has no adapter {', '.join(missing)} of the team; export a checkpoint "
                          f"of the run that trained it")
    staged = _staged_folder(out)
    try:
        for name, entry in team.adapters.items():
            _copy_adapter(adapters / name, staged / entry.path, hub_id(entry.base_model))
        cfg = source.config
        for spec in (cfg.protocol.name, (cfg.eval_task or cfg.task).name):
            if bundled_name(spec) is not None:
                _bundle(spec, staged)
        (staged / EXPORT_TEAM_FILE).write_text(_team_yaml(team, source), encoding="utf-8")
        card = model_card(team, cfg.model_dump(mode="json"), source.run_dir, source.step,
                          license or default_license(team))
        (staged / "README.md").write_text(card, encoding="utf-8")
        replace_folder(staged, out)
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    return out


def describe_team(source: RunSource) -> TeamFile:
    """The ``team.yaml`` of a run's checkpoint: every role with its full prompt and its adapter,
    the held-out task with its answer format, the eval decoding, and the controller tables."""
    from teamplay.envs.protocols import get_protocol
    from teamplay.envs.tasks import get_task
    from teamplay.training.wiring.controllers import load_controllers

    cfg = source.config
    protocol = get_protocol(cfg.protocol.name, **cfg.protocol.options)
    team = cfg.team if cfg.team is not None else protocol.default_team()
    protocol.validate_team(team)
    team = Team(roles=tuple(role.model_copy(update={
        "prompt": protocol.system_prompt(role), "adapter": None if role.scripted else role.adapter_name})
        for role in team.roles))
    task = cfg.eval_task or cfg.task
    controllers = None
    if isinstance(cfg, TrainConfig) and cfg.controllers.enabled:  # a federated run has no controllers
        tables = load_controllers(cfg.controllers, source.checkpoint).state_dict()["tables"]
        controllers = ExportedControllers(**cfg.controllers.model_dump(), tables=tables)
    return TeamFile(
        base_model=cfg.model.name, dtype=cfg.model.dtype, lora=cfg.model.lora,
        task=TeamTask(**task.model_dump(), answer_format=get_task(task.name, **task.options).answer_instruction)
        .model_copy(update={"name": bundled_name(task.name) or task.name}),
        protocol=cfg.protocol.model_copy(update={"name": bundled_name(cfg.protocol.name) or cfg.protocol.name}),
        team=team, adapters=_adapter_entries(team, cfg.model.name), decoding=cfg.eval_sampling,
        controllers=controllers, max_prompt_tokens=cfg.backend.max_prompt_tokens, seed=cfg.seed)


def _adapter_entries(team: Team, default_base: str) -> dict[str, AdapterEntry]:
    """One entry per adapter of the model-played roles: trainable when one of its roles trains."""
    played = [role for role in team.roles if not role.scripted]
    return {name: AdapterEntry(path=f"{ADAPTERS_DIR}/{name}",
                               trainable=any(r.trainable for r in played if r.adapter_name == name),
                               base_model=next(r.model or default_base for r in played if r.adapter_name == name))
            for name in team.adapter_names()}


def _team_yaml(team: TeamFile, source: RunSource) -> str:
    origin = source.run_dir.name if source.run_dir is not None else source.checkpoint.name
    step = f", step {source.step}" if source.step is not None else ""
    return (f"# The team of run {origin}{step}, exported by `teamplay export`. Evaluate it with\n"
            f"# `teamplay eval --team <this folder>`; the layout is described in teamplay/serving/files/team_file.py.\n"
            + team.to_yaml())


def _check_output(out: Path, run: Path, force: bool) -> None:
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--output {out} is a file; pass a folder for the export")
    if not out.is_dir() or not any(out.iterdir()):
        return
    if not force:
        raise ConfigError(f"--output {out} exists and is not empty; pass --force to replace it, or another folder")
    if out.resolve() == run.resolve() or out.resolve() in run.resolve().parents:
        raise ConfigError(f"--output {out} holds the run {run}: --force would delete it; export to another folder")


def _staged_folder(out: Path) -> Path:
    """An empty hidden folder beside ``out``, renamed into place once the export is whole."""
    out.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))


def _copy_adapter(src: Path, dst: Path, base_model: str) -> None:
    """The two files of a PEFT adapter; its config names the Hub id of its base (teamplay saved
    the path it loaded the base from, a cache folder for the embedded alias)."""
    dst.mkdir(parents=True)
    config = json.loads((src / ADAPTER_CONFIG).read_text(encoding="utf-8"))
    config["base_model_name_or_path"] = base_model
    (dst / ADAPTER_CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    shutil.copyfile(src / ADAPTER_WEIGHTS, dst / ADAPTER_WEIGHTS)


def _bundle(spec: str, folder: Path) -> None:
    """Copy the file a protocol or task spec names (``x.yaml``, ``x.py``, ``x.py:Name``) into ``folder``."""
    file = Path(spec_file(spec))
    if not file.is_file():
        raise ConfigError(f"{file}: not found; the run names it as its protocol or task, and the export copies "
                          f"it (run teamplay export from the folder the run was trained in)")
    target = folder / spec_file(bundled_name(spec))
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(file, target)


# -------------------------------------------------------------------------------------- push
def push_to_hub(folder: Path, repo: str, private: bool = False) -> str:
    """Upload an export folder to the Hub model repository ``repo`` (created when missing;
    ``private`` applies to a new repository only); returns the repository URL.

    Needs a Hub token (``hf auth login`` or ``HF_TOKEN``). Every failure (no huggingface_hub, offline
    mode, no token, a network error, a refusal by the Hub) is one TeamplayError line; the export
    folder stays complete, so the push can be retried.
    """
    try:
        from huggingface_hub import HfApi
    except ImportError as exc:
        raise TeamplayError(f"--push-to-hub needs huggingface_hub: pip install huggingface_hub ({exc})") from None
    from teamplay.hub import hub_offline

    if hub_offline():
        raise TeamplayError(f"--push-to-hub {repo}: HF_HUB_OFFLINE is set; unset it to upload (the export in "
                            f"{folder} is complete)")
    api = HfApi()
    try:
        url = api.create_repo(repo, private=private, exist_ok=True, repo_type="model")
        api.upload_folder(repo_id=repo, folder_path=folder, repo_type="model",
                          commit_message="teamplay export: adapters, team.yaml and model card")
    except Exception as exc:  # noqa: BLE001 - httpx, OS and Hub errors alike mean the upload did not happen
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise TeamplayError(f"--push-to-hub {repo}: the upload failed ({type(exc).__name__}: {first}); the export in "
                            f"{folder} is complete: check the token (hf auth login, HF_TOKEN) and the network, "
                            f"then push again") from None
    return str(url)

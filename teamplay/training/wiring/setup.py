"""Wiring a run from its config: items, env factory, model, backend, runner.

The CLI, the trainer and the benchmarks all build their pieces here, so a config means the same
thing everywhere.
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from teamplay.agents.backends import get_backend
from teamplay.agents.backends.base import GenerationBackend
from teamplay.agents.roles import Team
from teamplay.config import (
    BackendConfig,
    ControllerConfig,
    ModelConfig,
    ProtocolConfig,
    SamplingConfig,
    TaskConfig,
    TokenCreditConfig,
    TrainConfig,
    read_yaml,
)
from teamplay.credit import check_credit
from teamplay.credit.token import get_token_credit
from teamplay.envs.protocols import get_protocol
from teamplay.envs.protocols.base import Controller
from teamplay.envs.tasks import TASKS, get_task
from teamplay.envs.tasks.base import Task
from teamplay.envs.team_env import TeamEnv
from teamplay.errors import ConfigError, TeamplayWarning
from teamplay.json_files import read_json
from teamplay.records import SamplingParams, TaskItem
from teamplay.training.play.controllers import TeamControllers
from teamplay.training.wiring.placement import Placement, driver_placement, model_device

#: the file of an exported team (``teamplay export``, ``teamplay.serving.files.export``) that describes it;
#: its ``controllers.tables`` hold the learned speak/skip tables
EXPORT_TEAM_FILE = "team.yaml"


def load_items(cfg: TaskConfig) -> tuple[Task, list[TaskItem]]:
    """The task object and its items as the config selects them (``distinct``: the first ``limit``
    distinct problems of the whole split, in order; a ConfigError when the split has fewer)."""
    task = get_task(cfg.name, **cfg.options)
    if not cfg.distinct:
        return task, task.load(cfg.split, source=cfg.source, limit=cfg.limit, seed=cfg.seed)
    seen: set[str] = set()
    items = []
    for item in task.load(cfg.split, source=cfg.source, limit=None, seed=cfg.seed):
        if item.prompt not in seen:
            seen.add(item.prompt)
            items.append(item)
    if cfg.limit is not None:
        if len(items) < cfg.limit:
            raise ConfigError(f"task {cfg.name} ({cfg.split}): limit {cfg.limit} with distinct: true, but the "
                              f"split has only {len(items)} distinct problems; lower the limit or use a larger "
                              f"problem space")
        items = items[:cfg.limit]
    return task, items


def env_factory(task: Task, protocol_cfg: ProtocolConfig, team: Team | None,
                controller: Controller | None = None) -> tuple[Callable[[], TeamEnv], Team]:
    """A factory of fresh envs and the (validated) team they use.

    ``controller`` (e.g. ``TeamControllers.controller("train")``) becomes the protocol's
    ``controller`` option; a protocol without skippable turns refuses it with a ConfigError.
    Building one env up front validates the protocol and team, so config errors surface before
    any model is loaded.
    """
    options = dict(protocol_cfg.options)
    if controller is not None:
        if "controller" in options:
            raise ConfigError("protocol.options.controller: set controllers in the `controllers:` "
                              "section, not as a protocol option")
        options["controller"] = controller
    try:
        protocol = get_protocol(protocol_cfg.name, **options)
    except ConfigError as exc:
        if controller is not None and "unknown option 'controller'" in str(exc):
            raise ConfigError(f"controllers.enabled: protocol {protocol_cfg.name!r} has no skippable "
                              f"turns (use proposer_reviewer, debate, or a YAML protocol with "
                              f"`skippable: true`)") from None
        raise
    probe = TeamEnv(task, protocol, team)
    return partial(TeamEnv, task, protocol, probe.team), probe.team


def sampling_params(cfg: SamplingConfig, seed: int | None = None, entropies: bool = False) -> SamplingParams:
    return SamplingParams(max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature,
                          top_p=cfg.top_p, top_k=cfg.top_k, seed=seed, entropies=entropies)


def rollout_sampling(sampling: SamplingConfig, token: TokenCreditConfig | None) -> SamplingParams:
    """The training rollouts' sampling: ``sampling`` (the run's ``sampling`` section), recording token
    entropies when the token-level credit method (``credit.token``) reads them from the messages. A
    per-message method (``row``) reads them from the update's own forward pass instead (every
    learner applies it there)."""
    method = get_token_credit(token.method) if token is not None else None
    wants = method is not None and "entropies" in method.needs and method.row is None
    return sampling_params(sampling, entropies=wants)


def build_backend(model_cfg: ModelConfig, backend_cfg: BackendConfig, team: Team,
                  team_model=None, *, max_new_tokens: int) -> GenerationBackend:
    """The generation backend of the config (loads the model for hf/vllm unless given one).

    ``max_new_tokens`` is the most any generate call of the run will ask for (the largest of its
    sampling sections); the vllm engine sizes its context from it. A mixed team (roles with
    ``policy: scripted:...``) gets a ``MixedBackend`` around it; the model then holds the adapters
    of the model-played roles only.
    """
    return mixed_backend(_model_backend(model_cfg, backend_cfg, team, team_model,
                                        max_new_tokens=max_new_tokens), team)


def mixed_backend(backend: GenerationBackend, team: Team, seed: int = 0) -> GenerationBackend:
    """``backend`` wrapped so that the team's scripted roles play their policies (unchanged when
    no role is scripted)."""
    from teamplay.agents.backends.mixed import MixedBackend

    scripted = team.scripted_roles()
    return MixedBackend(backend, scripted, seed=seed) if scripted else backend


def _model_backend(model_cfg: ModelConfig, backend_cfg: BackendConfig, team: Team,
                   team_model=None, *, max_new_tokens: int) -> GenerationBackend:
    if backend_cfg.name == "scripted":
        return get_backend("scripted", policy=backend_cfg.policy)
    if team_model is None:
        team_model = build_team_model(model_cfg, team, device=model_device(Placement.IN_PROCESS, model_cfg))
    parts = getattr(team_model, "parts", None)
    if parts is not None:  # a heterogeneous team: one backend per base, requests routed by adapter
        from teamplay.agents.backends.routing import RoutingBackend

        backends = {base: _model_backend(model_cfg, backend_cfg, team, team_model=part,
                                        max_new_tokens=max_new_tokens)
                    for base, part in parts.items()}
        return RoutingBackend(backends, {a: team_model.base_of(a) for a in team_model.adapter_names})
    if backend_cfg.name == "vllm":
        return get_backend("vllm", team_model=team_model, max_prompt_tokens=backend_cfg.max_prompt_tokens,
                           max_new_tokens=max_new_tokens,
                           gpu_memory_utilization=backend_cfg.gpu_memory_utilization,
                           enforce_eager=backend_cfg.enforce_eager,
                           **backend_cfg.engine.model_dump(exclude_none=True))
    return get_backend(backend_cfg.name, team_model=team_model, max_prompt_tokens=backend_cfg.max_prompt_tokens,
                       micro_batch_size=backend_cfg.micro_batch_size, merge_adapters=backend_cfg.merge_adapters,
                       sampler=backend_cfg.sampler)


def lora_settings(model_cfg: ModelConfig) -> tuple[dict[str, Any], Path | None]:
    """The LoRA keyword arguments a team model is built with, and the adapters folder of
    ``model.checkpoint`` (None without one): a checkpoint's saved LoRA shape wins over ``model.lora``."""
    from teamplay.agents.team_model import read_adapter_config
    from teamplay.training.store.checkpoint import resolve_adapters_dir

    lora = dict(r=model_cfg.lora.r, alpha=model_cfg.lora.alpha, dropout=model_cfg.lora.dropout,
                target_modules=model_cfg.lora.target_modules, fused=model_cfg.lora.fused)
    adapters_dir = resolve_adapters_dir(model_cfg.checkpoint) if model_cfg.checkpoint else None
    if adapters_dir is not None:
        saved = read_adapter_config(next(p for p in sorted(adapters_dir.iterdir()) if p.is_dir()))
        targets = saved.target_modules
        lora = dict(r=saved.r, alpha=saved.lora_alpha, dropout=saved.lora_dropout,
                    target_modules=targets if isinstance(targets, str) else sorted(targets), fused=model_cfg.lora.fused)
    return lora, adapters_dir


def build_team_model(model_cfg: ModelConfig, team: Team, seed: int = 0, device=None):
    """The shared base model with one LoRA adapter per adapter name of the team.

    With ``model.checkpoint`` set, the adapters are loaded from it and their LoRA shape (rank,
    alpha, target modules) is taken from the saved adapters, not from ``model.lora``. ``device``:
    where every base (with its adapters) goes; None keeps it on the CPU. Callers that place it ask
    ``placement.model_device`` for the device of the kind of process they are.
    """
    from teamplay.agents.models import load_configured_model, resolve_dtype, slow_cpu_dtype
    from teamplay.agents.team_model import TeamModel

    lora, adapters_dir = lora_settings(model_cfg)
    dtype = resolve_dtype(model_cfg.dtype, device)  # "auto": bfloat16 where the device has it natively
    try:
        bases = team.bases(model_cfg.name)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if len(bases) > 1:  # a heterogeneous team: one base (and its roles' adapters) per model
        from teamplay.agents.multi_base import MultiBaseTeamModel

        parts = {}
        for base, roles in bases.items():
            model, tokenizer = load_configured_model(base, model_cfg.dtype, device)
            sub = Team(roles=tuple(r for r in team.roles if r.name in roles))
            parts[base] = TeamModel.from_team(model, tokenizer, sub, init_seed=seed, **lora)
        team_model = MultiBaseTeamModel(parts)
    else:
        model, tokenizer = load_configured_model(next(iter(bases)), model_cfg.dtype, device)
        team_model = TeamModel.from_team(model, tokenizer, team, init_seed=seed, **lora)
    if device is not None and str(device) != "cpu":  # adapters included: peft put them beside their bases
        for part in getattr(team_model, "parts", {"": team_model}).values():
            part.model.to(device)
    elif (slow := slow_cpu_dtype(dtype)) is not None:
        warnings.warn(TeamplayWarning(slow), stacklevel=2)
    if adapters_dir is not None:
        team_model.load_adapters(adapters_dir)
    return team_model


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


#: resources the trainer hands credit methods (``CreditResources`` fields it sets; ``replay``,
#: ``answer_probability`` and ``judge`` only when the method needs them; the token statistics go to
#: the token method, after the message method)
TRAINER_RESOURCES = frozenset({"transcript_scorer", "backend", "batch_rewards", "replay", "answer_probability",
                               "judge"})


@dataclass(frozen=True)
class CheckedRun:
    """A training config that passed every check needing no data set or model (``check_run``), with
    what those checks parsed, so no later stage parses the config again.

    Fields:
        cfg: the config.
        credit_options: the credit method's options, parsed by the method's own model.
        credit_needs: the resources the method asks for with those options (``"replay"``, ...).
        token_method: the token-level credit method (``credit.token``), or None.
        token_options: its options, parsed (None without ``credit.token``).
    """

    cfg: TrainConfig
    credit_options: Any
    credit_needs: frozenset[str]
    token_method: Any = None
    token_options: Any = None


def check_run(cfg: TrainConfig, provided: frozenset[str] = TRAINER_RESOURCES) -> CheckedRun:
    """The one validation pass of a training run after the config model's own (pydantic) checks and
    before a model or data set loads: the task and protocol exist and take their options, the credit
    method exists, takes its options, works with the protocol and gets every resource it needs
    (``provided``), the token method exists and takes its options. Raises ConfigError (one line)."""
    from teamplay.credit import get_credit
    from teamplay.credit.token.base import parse_token_options

    TASKS.get(cfg.task.name)
    if cfg.eval_task is not None:
        TASKS.get(cfg.eval_task.name)
    protocol = get_protocol(cfg.protocol.name, **cfg.protocol.options)
    options = check_credit(cfg.credit.method, cfg.credit.options, protocol.name, provided)
    needs = frozenset(get_credit(cfg.credit.method).requires(options))
    if cfg.credit.judge_model is not None and "judge" not in needs:
        raise ConfigError(f"credit.judge_model: credit method {cfg.credit.method!r} with these options uses no "
                          f"judge; remove judge_model, or use a judge (shapley with value: judge)")
    token = cfg.credit.token
    if token is None:
        return CheckedRun(cfg, options, needs)
    method = get_token_credit(token.method)
    return CheckedRun(cfg, options, needs, method, parse_token_options(method, token.options))


def build_judge_backend(cfg: TrainConfig, run: RunParts) -> GenerationBackend:
    """The backend of the generative judge (the ``judge`` credit resource; its requests name no adapter):
    the run's own backend, so the team's base model with every adapter off, or, with
    ``credit.judge_model``, an hf backend on that model (no adapters, ``model.dtype``, the driver's
    device, the run's prompt bound and micro-batch). A team with several base models has no one
    base to judge with: it must name a judge model (ConfigError)."""
    from teamplay.agents.models import load_configured_model
    from teamplay.agents.team_model import TeamModel

    if cfg.credit.judge_model is None:
        if getattr(run.team_model, "parts", None) is not None:
            raise ConfigError("credit.judge_model: this team has several base models, so the judge cannot be "
                              "'the base model with adapters off'; name the judge's model in credit.judge_model")
        return run.backend
    device = model_device(driver_placement(cfg.distributed), cfg.model)
    model, tokenizer = load_configured_model(cfg.credit.judge_model, cfg.model.dtype, device)
    if device is not None and str(device) != "cpu":
        model.to(device)
    return get_backend("hf", team_model=TeamModel(model, tokenizer, adapters=()),
                       max_prompt_tokens=cfg.backend.max_prompt_tokens,
                       micro_batch_size=cfg.backend.micro_batch_size)


@dataclass
class RunParts:
    """Everything a training run is wired from (see ``build_run``)."""

    task: Task
    items: list[TaskItem]
    eval_task: Task
    eval_items: list[TaskItem]
    controllers: TeamControllers | None
    team: Team
    make_env: Callable[[], TeamEnv]
    make_eval_env: Callable[[], TeamEnv]
    team_model: Any
    backend: GenerationBackend
    #: the training rollouts' decoding (``rollout_sampling``)
    sampling: SamplingParams
    #: whether ``build_run`` built ``backend`` (the run closes it when it ends: a vLLM engine's
    #: processes and KV cache) or the caller passed it in (it stays the caller's to close)
    owns_backend: bool

    @contextmanager
    def closed_on_error(self) -> Iterator[RunParts]:
        """Build the rest of a run inside this: when anything raises, the backend the run built
        (``owns_backend``) is closed before the error propagates, so a run that fails to start
        leaves no vLLM engine behind; a backend passed in stays open, the caller's to close."""
        try:
            yield self
        except BaseException:
            if self.owns_backend:
                self.backend.close()
            raise


def build_run(cfg: TrainConfig, team_model=None, backend: GenerationBackend | None = None,
              task: Task | None = None, items: Sequence[TaskItem] | None = None,
              eval_items: Sequence[TaskItem] | None = None, backend_name: str | None = None,
              placement: Placement | None = None) -> RunParts:
    """Wire a training run from its config: items, controllers, env factories (training decides with
    the controllers' "train" mode, held-out evaluation as ``teamplay eval`` would), the team model
    and backend (built unless given: ``owns_backend``; built last, so a refused run never opens
    one, and ``RunParts.closed_on_error`` closes it when what is built from the parts fails), and
    the rollouts' decoding.

    ``task`` with ``items`` (and ``eval_items``) replace the config's task sections, for a task
    defined in Python. Errors are ConfigErrors raised before the model loads. ``backend_name``
    replaces ``backend.name`` for this process's backend (the driver of a distributed run generates
    with hf, whatever its workers use). ``placement`` is the kind of process this driver is, which
    places the team model it builds (``placement.model_device``); None: ``driver_placement`` of
    ``cfg.distributed``.
    """
    if task is not None:
        if not items:
            raise ConfigError("Trainer(task=...) needs the training items too (items=[...])")
        train_task, train_items = task, list(items)
        eval_task, held_out = task, list(eval_items or [])
    else:
        train_task, train_items = load_items(cfg.task)
        eval_task, held_out = train_task, []
        if cfg.eval_task is not None:
            eval_task, held_out = load_items(cfg.eval_task)
    if not train_items:
        raise ConfigError("task: no training items were loaded")
    controllers = TeamControllers(cfg.controllers) if cfg.controllers.enabled else None
    make_env, team = env_factory(train_task, cfg.protocol, cfg.team,
                                 controller=controllers.controller("train") if controllers else None)
    if controllers is not None:
        make_eval_env, _ = env_factory(eval_task, cfg.protocol, team, controller=controllers.controller())
    elif eval_task is not train_task:
        make_eval_env, _ = env_factory(eval_task, cfg.protocol, team)
    else:
        make_eval_env = make_env
    team.require_trainable()  # the protocol's default team too, before the model loads
    if cfg.credit.token is not None and cfg.credit.token.roles is not None:  # before the model loads
        names = {role.name for role in team.roles}
        unknown = sorted(set(cfg.credit.token.roles) - names)
        if unknown:
            raise ConfigError(f"credit.token.roles: {', '.join(unknown)} is not a role of the team; "
                              f"roles: {', '.join(sorted(names))}")
    if team_model is None:
        where = driver_placement(cfg.distributed) if placement is None else placement
        team_model = build_team_model(cfg.model, team, cfg.seed, device=model_device(where, cfg.model))
    sampling = rollout_sampling(cfg.sampling, cfg.credit.token)  # before the backend: nothing after it may fail
    owns_backend = backend is None
    if backend is None:
        backend_cfg = cfg.backend if backend_name is None else cfg.backend.model_copy(update={"name": backend_name})
        backend = build_backend(cfg.model, backend_cfg, team, team_model=team_model,
                                max_new_tokens=max(cfg.sampling.max_new_tokens, cfg.eval_sampling.max_new_tokens))
    else:
        backend = mixed_backend(backend, team)  # a given model backend still plays only the LLM roles
    return RunParts(task=train_task, items=train_items, eval_task=eval_task, eval_items=held_out,
                    controllers=controllers, team=team, make_env=make_env, make_eval_env=make_eval_env,
                    team_model=team_model, backend=backend, sampling=sampling, owns_backend=owns_backend)


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch's global generators (torch picks a random seed per process
    otherwise). Rollouts and minibatch orders use their own seeded generators; this covers
    everything else, e.g. a user's task code."""
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)

"""Wiring a run from its config: items, env factory, model, backend, runner.

The CLI, the trainer and the benchmarks all build their pieces here, so a config means the same
thing everywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from teamplay.agents.backends import get_backend
from teamplay.agents.backends.base import GenerationBackend, SamplingParams
from teamplay.agents.roles import Team
from teamplay.config import BackendConfig, ModelConfig, ProtocolConfig, SamplingConfig, TaskConfig
from teamplay.envs.protocols import get_protocol
from teamplay.envs.records import TaskItem
from teamplay.envs.tasks import get_task
from teamplay.envs.tasks.base import Task
from teamplay.envs.team_env import TeamEnv


def load_items(cfg: TaskConfig) -> tuple[Task, list[TaskItem]]:
    """The task object and its items as the config selects them."""
    task = get_task(cfg.name, **cfg.options)
    items = task.load(cfg.split, source=cfg.source, limit=cfg.limit, seed=cfg.seed)
    return task, items


def env_factory(task: Task, protocol_cfg: ProtocolConfig, team: Team | None) -> tuple[Callable[[], TeamEnv], Team]:
    """A factory of fresh envs and the (validated) team they use.

    Building one env up front validates the protocol and team, so config errors surface before
    any model is loaded.
    """
    protocol = get_protocol(protocol_cfg.name, **protocol_cfg.options)
    probe = TeamEnv(task, protocol, team)
    return partial(TeamEnv, task, protocol, probe.team), probe.team


def sampling_params(cfg: SamplingConfig, seed: int | None = None) -> SamplingParams:
    return SamplingParams(max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature,
                          top_p=cfg.top_p, top_k=cfg.top_k, seed=seed)


def build_backend(model_cfg: ModelConfig, backend_cfg: BackendConfig, team: Team,
                  team_model=None) -> GenerationBackend:
    """The generation backend of the config (loads the model for hf/vllm unless given one)."""
    if backend_cfg.name == "scripted":
        return get_backend("scripted", policy=backend_cfg.policy)
    if team_model is None:
        team_model = build_team_model(model_cfg, team)
    return get_backend(backend_cfg.name, team_model=team_model,
                       max_prompt_tokens=backend_cfg.max_prompt_tokens)


def build_team_model(model_cfg: ModelConfig, team: Team):
    """The shared base model with one LoRA adapter per adapter name of the team."""
    from teamplay.agents.models import load_model
    from teamplay.agents.team_model import TeamModel

    model, tokenizer = load_model(model_cfg.name, dtype=model_cfg.dtype)
    lora = model_cfg.lora
    team_model = TeamModel.from_team(model, tokenizer, team, r=lora.r, alpha=lora.alpha,
                                     dropout=lora.dropout, target_modules=lora.target_modules)
    if model_cfg.checkpoint:
        team_model.load_adapters(model_cfg.checkpoint)
    return team_model

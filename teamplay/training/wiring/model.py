"""The team model: one shared base model (one per base of a heterogeneous team) with a LoRA
adapter per adapter name of the team, from the ``model`` section."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from teamplay.agents.roles import Team
from teamplay.config import ModelConfig
from teamplay.errors import ConfigError, TeamplayWarning


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

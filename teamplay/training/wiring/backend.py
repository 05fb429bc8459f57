"""The generation backends of a run: the team's (``build_backend``, from the ``model`` and
``backend`` sections; scripted roles played beside the model's by ``mixed_backend``) and the
generative judge's (``build_judge_backend``)."""

from __future__ import annotations

from teamplay.agents.backends import get_backend
from teamplay.agents.backends.base import GenerationBackend
from teamplay.agents.roles import Team
from teamplay.config import BackendConfig, DistributedConfig, ModelConfig
from teamplay.training.wiring.model import build_team_model
from teamplay.training.wiring.placement import Placement, driver_placement, model_device


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


def build_judge_backend(judge_model: str | None, model_cfg: ModelConfig, backend_cfg: BackendConfig,
                        distributed: DistributedConfig | None, team_model,
                        backend: GenerationBackend) -> GenerationBackend:
    """The backend of the generative judge (the ``judge`` credit resource; its requests name no adapter):
    the run's own ``backend`` (on ``team_model``), so the team's base model with every adapter off, or, with
    ``judge_model`` (``credit.judge_model``), an hf backend on that model (no adapters, ``model.dtype``,
    the driver's device (``distributed``: the run's section), the run's prompt bound and micro-batch).
    A team with several base models has no one base to judge with: it must name a judge model (refused
    before: ``checks.check_wired``)."""
    from teamplay.agents.models import load_configured_model
    from teamplay.agents.team_model import TeamModel

    if judge_model is None:
        return backend
    device = model_device(driver_placement(distributed), model_cfg)
    model, tokenizer = load_configured_model(judge_model, model_cfg.dtype, device)
    if device is not None and str(device) != "cpu":
        model.to(device)
    return get_backend("hf", team_model=TeamModel(model, tokenizer, adapters=()),
                       max_prompt_tokens=backend_cfg.max_prompt_tokens,
                       micro_batch_size=backend_cfg.micro_batch_size)

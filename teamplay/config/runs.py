"""Typed configuration of a teamplay run, loaded from YAML and overridden from the CLI.

Every field has a description; ``teamplay eval --help`` and the README's config table are built
from the same models. Loading reports the first invalid field by its dotted path, with the value
given and what is allowed:

    config error: sampling.temperature: Input should be greater than or equal to 0 (got -1)

``--set a.b=c`` overrides are applied to the YAML mapping before validation; values are parsed as
YAML scalars (``--set sampling.temperature=0.7``, ``--set team.roles=[...]``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from teamplay.agents.roles import Team
from teamplay.errors import ConfigError

#: the sampling temperatures every backend accepts: vLLM refuses more than 2 and raises values in
#: (0, 0.01) to 0.01 (0 means greedy)
MIN_TEMPERATURE, MAX_TEMPERATURE = 0.01, 2.0

#: stages whose speak/skip action values are defined (proposer_reviewer's two, debate's revision rounds)
STAGES = ("propose", "review", "debate")
Stage = Literal["propose", "review", "debate"]
Mode = Literal["average_greedy", "current", "sample", "always_speak"]


class ControllerConfig(BaseModel):
    """The ``controllers:`` section of a team config."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    enabled: bool = Field(False, description="Learned speak/skip controllers (regret matching) before "
                                             "skippable turns (proposer_reviewer, debate).")
    mode: Mode = Field("average_greedy", description="How evaluation decides: average_greedy, current, "
                                                     "sample, or always_speak (the baseline). Training "
                                                     "always samples the current strategy.")
    price_per_token: float = Field(0.0, ge=0.0, description="Subtracted per generated token from the "
                                                            "value of speaking (cost-aware learning).")
    price_per_call: float = Field(0.0, ge=0.0, description="Subtracted per model call from the value "
                                                           "of speaking.")
    stages: tuple[Stage, ...] = Field(STAGES, min_length=1, description="Stages the controllers decide; "
                                      "skippable turns of other stages always speak.")


class _Section(BaseModel):
    # allow_inf_nan=False: `lr: .inf` or `temperature: 1e400` (inf once parsed) mean nothing and
    # would train on NaNs; every float of a config must be finite
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class TaskConfig(_Section):
    """Which benchmark items to use."""

    name: str = Field("arith", description="Task name: arith, gsm8k, math, math500, gpqa.")
    split: str = Field("test", description="Split to load (train or test).")
    source: str | None = Field(
        None, description="Local file to load instead of the hub (jsonl/parquet/csv); for arith, "
                          "the level as 'level=N'.")
    limit: int | None = Field(None, ge=1, description="Keep the first N items.")
    distinct: bool = Field(False, description="Drop repeated problems (same prompt text), keeping the "
                                              "first; limit then counts distinct problems.")
    seed: int = Field(0, description="Seed for procedural tasks and choice shuffling.")
    options: dict[str, Any] = Field(default_factory=dict,
                                    description="Task constructor options, e.g. {level: 3} for arith.")


class ProtocolConfig(_Section):
    """How the team talks."""

    name: str = Field("single", description="Protocol name (teamplay list) or a path to a protocol "
                                            "YAML/Python file.")
    options: dict[str, Any] = Field(default_factory=dict,
                                    description="Protocol options, e.g. {rounds: 4, n_agents: 3}.")


class LoraConfig(_Section):
    """LoRA adapters (one per role adapter name) on the shared base model."""

    r: int = Field(8, ge=1, description="LoRA rank.")
    alpha: int = Field(16, ge=1, description="LoRA alpha (scale = alpha / r).")
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="LoRA dropout.")
    target_modules: str | list[str] = Field(
        "all-linear", description="Modules to adapt: 'all-linear' or a list of module names.")


class ModelConfig(_Section):
    """The shared base model."""

    name: str = Field("smollm2-135m", description="Hub id, local path, or the embedded alias "
                                                  "'smollm2-135m'.")
    dtype: Literal["float32", "bfloat16", "float16", "auto"] = Field(
        "float32", description="Weights dtype of the base model (LoRA adapters stay float32). auto: "
                               "bfloat16 with a float32 output head where the device computes bfloat16 "
                               "natively (a CPU with AVX512-BF16 or AMX, a CUDA GPU with bfloat16), "
                               "float32 elsewhere.")
    lora: LoraConfig = Field(default_factory=LoraConfig, description="LoRA adapter settings.")
    checkpoint: str | None = Field(None, description="Run folder or checkpoint folder whose "
                                                     "adapters to load (teamplay eval --checkpoint).")
    device: str = Field("auto", pattern=r"^(auto|cpu|cuda(:\d+)?)$",
                        description="Where the model trains and the hf backend generates: auto (cuda when "
                                    "torch sees a GPU, else cpu), cpu, cuda or cuda:N. Under `distributed:` "
                                    "each Ray actor places its own copy and the driver's stays on the CPU.")


class VLLMEngineConfig(_Section):
    """vLLM engine arguments a run may set (``backend.engine``; only with ``backend.name: vllm``).
    Unset fields keep vLLM's defaults; those the backend derives from the config (model, dtype,
    max_model_len, LoRA sizes) are not here."""

    max_num_batched_tokens: int | None = Field(None, ge=1, description="Tokens one engine step may "
                                                                       "schedule (prefill chunk size).")
    max_num_seqs: int | None = Field(None, ge=1, description="Sequences decoded together at most.")
    enable_chunked_prefill: bool | None = Field(None, description="Split long prefills across steps.")
    enable_prefix_caching: bool | None = Field(None, description="Reuse the KV cache of shared prompt "
                                                                 "prefixes.")
    seed: int | None = Field(None, description="The engine's own seed (each request is seeded anyway).")
    tensor_parallel_size: int | None = Field(None, ge=1, description="GPUs one engine spans.")
    swap_space: float | None = Field(None, ge=0.0, description="CPU swap space per GPU, GiB.")


class BackendConfig(_Section):
    """Generation backend."""

    name: Literal["hf", "vllm", "scripted"] = Field("hf", description="hf, vllm or scripted.")
    policy: str = Field("oracle", description="Scripted policy (scripted backend only): oracle, "
                                              "wrong, contrarian, echo, random.")
    max_prompt_tokens: int = Field(1536, ge=16, description="Prompt budget; longer transcripts are "
                                                            "truncated by the stated rule.")
    max_batch: int | None = Field(None, ge=1, description="Most requests per generate call.")
    gpu_memory_utilization: float = Field(0.5, gt=0.0, le=1.0, description="vllm: share of GPU memory the "
                                                                          "engine may take (the learner "
                                                                          "needs the rest).")
    enforce_eager: bool = Field(False, description="vllm: run without CUDA graphs (faster start, slower "
                                                   "decoding).")
    engine: VLLMEngineConfig = Field(default_factory=VLLMEngineConfig, description="vllm: further engine "
                                                                                   "arguments.")

    @model_validator(mode="after")
    def _engine_only_for_vllm(self) -> BackendConfig:
        if self.name != "vllm" and self.engine.model_dump(exclude_none=True):  # a dumped config holds Nones
            raise ValueError(f"backend.engine: vLLM engine arguments, but backend.name is {self.name!r}; "
                             f"set backend.name=vllm or drop backend.engine")
        return self


class SamplingConfig(_Section):
    """Decoding settings."""

    max_new_tokens: int = Field(256, ge=1, description="Tokens generated per message at most.")
    temperature: float = Field(0.0, ge=0.0, le=MAX_TEMPERATURE,
                               description=f"0 = greedy; otherwise in [{MIN_TEMPERATURE}, {MAX_TEMPERATURE}] "
                                           f"(vLLM's range).")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling mass.")
    top_k: int = Field(0, ge=0, description="Top-k sampling (0 = off).")

    @field_validator("temperature")
    @classmethod
    def _temperature_in_range(cls, value: float) -> float:
        # vLLM raises temperatures in (0, 0.01) to 0.01, so the sampled policy would not be the
        # configured one; refused for every backend so that a config means the same on all of them
        if 0 < value < MIN_TEMPERATURE:
            # a typed error (not ValueError): reported with its field path, e.g. eval_sampling.temperature
            raise PydanticCustomError("temperature_range", "use 0 (greedy) or a value in [{low}, {high}]",
                                      {"low": MIN_TEMPERATURE, "high": MAX_TEMPERATURE})
        return value


def _check_backend_fits_model(backend: BackendConfig, model: ModelConfig) -> None:
    """The vllm backend serves LoRA adapters (every team has them) only in bfloat16/float16: refused
    here, before the model loads, rather than by the engine after it."""
    from teamplay.agents.backends.vllm import LORA_DTYPES, lora_dtype_refusal

    if backend.name == "vllm" and model.dtype not in LORA_DTYPES:
        raise ValueError(lora_dtype_refusal(model.dtype))


class EvalConfig(_Section):
    """A whole evaluation run (`teamplay eval`)."""

    task: TaskConfig = Field(default_factory=TaskConfig, description="Benchmark items.")
    protocol: ProtocolConfig = Field(default_factory=ProtocolConfig, description="Team protocol.")
    team: Team | None = Field(None, description="Roles; None uses the protocol's default team.")
    model: ModelConfig = Field(default_factory=ModelConfig, description="Base model.")
    controllers: ControllerConfig = Field(
        default_factory=ControllerConfig, description="Learned speak/skip controllers; their tables come "
                                                      "from model.checkpoint (teamplay eval --checkpoint).")
    backend: BackendConfig = Field(default_factory=BackendConfig, description="Generation backend.")
    sampling: SamplingConfig = Field(default_factory=SamplingConfig, description="Decoding.")
    samples: int = Field(1, ge=1, description="Episodes per problem.")
    seed: int = Field(0, description="Seed of env resets and sampling.")
    output_dir: str = Field("runs/eval", description="Folder for results.json and transcripts.jsonl.")

    @model_validator(mode="after")
    def _backend_fits_model(self) -> EvalConfig:
        _check_backend_fits_model(self.backend, self.model)
        return self


C = TypeVar("C", bound=BaseModel)


def set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``data[a][b][c] = value`` for ``dotted = "a.b.c"``, creating mappings on the way."""
    keys = dotted.split(".")
    node = data
    for i, key in enumerate(keys[:-1]):
        child = node.get(key)
        if child is None:
            child = node[key] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"--set {dotted}: {'.'.join(keys[:i + 1])} is not a section")
        node = child
    node[keys[-1]] = value


def parse_overrides(overrides: Sequence[str]) -> list[tuple[str, Any]]:
    """Parse ``["a.b=1", "c=[x, y]"]`` into (key, YAML-parsed value) pairs."""
    parsed = []
    for text in overrides:
        key, sep, raw = text.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {text!r}: expected KEY=VALUE, e.g. --set sampling.temperature=0.7")
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError as exc:
            raise ConfigError(f"--set {key}: value {raw!r} is not valid YAML ({exc.problem})") from None
        parsed.append((key.strip(), value))
    return parsed


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping.

    Plain YAML loaders keep the last value silently, so ``lr: 1e-4`` followed later by
    ``lr: 1.0`` trains with 1.0 while the reader of the file sees 1e-4.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                first = seen[key].start_mark.line + 1
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first given on line {first})", key_node.start_mark)
            seen[key] = key_node
        return super().construct_mapping(node, deep=deep)


def read_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping; missing file, syntax errors and duplicate keys name the file (and line)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"malformed YAML in {path}{where}: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections, got {type(data).__name__}")
    return data


def build_config(model: type[C], data: Mapping[str, Any], overrides: Sequence[str] = ()) -> C:
    """Validate ``data`` (plus ``--set`` overrides) into ``model``; errors name the field."""
    merged = yaml.safe_load(yaml.safe_dump(dict(data)))  # deep copy of plain data
    for key, value in parse_overrides(overrides):
        set_dotted(merged, key, value)
    try:
        return model.model_validate(merged)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc)) from None


def load_config(model: type[C], path: str | Path | None, overrides: Sequence[str] = ()) -> C:
    """Load a YAML file (or defaults when ``path`` is None) into ``model``."""
    return build_config(model, read_yaml(path) if path else {}, overrides)


def format_validation_error(exc: ValidationError) -> str:
    """One line per invalid field: ``a.b.c: message (got value)``."""
    lines = []
    for err in exc.errors():
        if err["type"] == "value_error" and (not err["loc"] or "ctx" in err):
            # a cross-field rule (model_validator): its message names the fields itself
            lines.append(str(err["ctx"]["error"]) if "ctx" in err else err["msg"])
            continue
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown field (check the spelling; see the README's config table)"
        got = err.get("input")
        shown = "" if isinstance(got, dict) or err["type"] == "missing" else f" (got {got!r})"
        lines.append(f"{where}: {msg}{shown}")
    return "; ".join(lines)


class TokenCreditConfig(_Section):
    """Token-level credit: spread each message's advantage over its tokens."""

    method: str = Field(..., description="Token credit method (teamplay list), e.g. dgpo, aem.")
    options: dict[str, Any] = Field(default_factory=dict, description="Options of that method.")
    roles: list[str] | None = Field(None, description="Roles whose messages get token credit; the "
                                                      "others keep one advantage per message. "
                                                      "None = every role.")


class CreditConfig(_Section):
    """How the team reward becomes per-message advantages."""

    method: str = Field("grpo", description="Credit method (teamplay list), e.g. grpo, shapley.")
    options: dict[str, Any] = Field(default_factory=dict, description="Options of that method.")
    token: TokenCreditConfig | None = Field(None, description="Token-level credit after the message "
                                                              "method (None = one advantage per message).")


class ObjectiveConfig(_Section):
    """The policy-gradient objective.

    Combinations with no meaning are refused at load, never silently dropped: GSPO has its own
    sequence-level aggregation and no KL term, so ``loss_agg``, ``kl_beta``, ``kl_clamp``,
    ``dual_clip`` and ``norm_tokens`` are refused with it unless they keep their defaults;
    ``logratio_clamp`` is GSPO's only; ``kl_clamp`` needs ``kl_beta > 0``; ``norm_tokens`` belongs
    to ``loss_agg: seq_mean_token_sum_norm``.

    Every rule reads the values, never which fields were given: a dumped config (``model_dump``,
    every field given) must validate to the same config, since the federated sites, ``--resume``,
    ``export`` and ``eval --team`` all read a run's config back from its dump.
    """

    name: Literal["grpo", "gspo"] = Field("grpo", description="grpo: token-level ratio; gspo: "
                                                              "sequence-level (length-normalised) ratio.")
    clip_low: float = Field(0.2, gt=0.0, lt=1.0, description="Lower clip range epsilon.")
    clip_high: float | None = Field(None, gt=0.0, description="Upper clip range (None = clip_low).")
    kl_beta: float = Field(0.0, ge=0.0, description="GRPO: weight of the k3 KL to the base model "
                                                    "(adapters disabled); 0 = no KL term.")
    kl_clamp: float | None = Field(None, gt=0.0, description="GRPO: clamp the k3 estimate to at most "
                                                             "this (verl: 10); None = no clamp.")
    loss_agg: Literal["seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm"] = Field(
        "seq_mean_token_mean", description="GRPO token aggregation: per-sequence mean then mean (GRPO), "
                                           "mean over all tokens (DAPO), or token sum / a constant "
                                           "(Dr. GRPO).")
    norm_tokens: int | None = Field(None, ge=1, description="The constant of seq_mean_token_sum_norm "
                                                            "(None = sampling.max_new_tokens).")
    dual_clip: float | None = Field(None, gt=1.0, description="GRPO: dual-clip constant c for negative "
                                                              "advantages (verl: 3); None = off.")
    logratio_clamp: float | None = Field(None, gt=0.0, description="GSPO: clamp the mean log-ratio "
                                                                    "to [-c, c] before exp (TRACER: 2).")

    @model_validator(mode="after")
    def _meaningful_combination(self) -> ObjectiveConfig:
        """A field the chosen objective ignores is refused, never silently dropped."""
        if self.name == "gspo":
            for name, why in (("loss_agg", "gspo aggregates per sequence (length-normalised ratio)"),
                              ("kl_beta", "the gspo objective has no KL term"),
                              ("kl_clamp", "the gspo objective has no KL term"),
                              ("dual_clip", "dual-clip is defined for the token ratio of grpo"),
                              ("norm_tokens", "gspo aggregates per sequence")):
                # each default is what gspo does anyway: no KL (kl_beta 0, kl_clamp None), no dual
                # clip, and a mean over each sequence's tokens then over sequences (seq_mean_token_mean,
                # norm_tokens None); so a default, given or not, drops nothing
                if getattr(self, name) != type(self).model_fields[name].default:
                    raise ValueError(f"objective.{name}: {why}, so it does not apply to name 'gspo'; "
                                     f"remove it or use objective.name: grpo")
        elif self.logratio_clamp is not None:
            raise ValueError(f"objective.logratio_clamp: only the gspo objective clamps its sequence "
                             f"log-ratio; remove it for {self.name!r}")
        if self.kl_clamp is not None and self.kl_beta == 0:
            raise ValueError("objective.kl_clamp: needs kl_beta > 0 (there is no KL term to clamp)")
        if self.norm_tokens is not None and self.loss_agg != "seq_mean_token_sum_norm":
            raise ValueError("objective.norm_tokens: the constant of loss_agg 'seq_mean_token_sum_norm'; "
                             "set that loss_agg or remove it")
        return self


class OptimConfig(_Section):
    """Optimisation of the LoRA adapters."""

    lr: float = Field(1e-4, gt=0.0, description="AdamW learning rate.")
    weight_decay: float = Field(0.0, ge=0.0, description="AdamW weight decay.")
    schedule: Literal["constant", "linear", "cosine"] = Field("constant", description="LR schedule "
                                                                                     "over the run.")
    warmup_steps: int = Field(0, ge=0, description="Linear warm-up steps.")
    epochs: int = Field(1, ge=1, description="Passes over each step's rollouts.")
    minibatch_size: int = Field(16, ge=1, description="Messages per optimiser minibatch.")
    grad_accum: int = Field(1, ge=1, description="Minibatches per optimiser step.")
    grad_clip: float | None = Field(1.0, gt=0.0, description="Gradient-norm clip (None = off).")
    max_nonfinite_steps: int = Field(
        3, ge=1, description="Consecutive training steps with a non-finite loss or gradient (each such "
                             "optimiser step is skipped, with a warning) after which the run stops with an "
                             "error; the last checkpoint keeps the last finite adapters.")


class RolloutConfig(_Section):
    """Rollout sizes per training step."""

    problems_per_step: int = Field(4, ge=1, description="B: problems sampled per step.")
    group_size: int = Field(4, ge=1, description="G: episodes per problem (a credit group).")


class WorkerResources(_Section):
    """Ray resources of one worker (an actor)."""

    num_cpus: float = Field(1.0, ge=0.0, description="CPUs reserved per worker.")
    num_gpus: float = Field(0.0, ge=0.0, description="GPUs per worker (a fraction shares a GPU); "
                                                     "learner ranks with GPUs use NCCL, else gloo.")


class DistributedResources(_Section):
    """Resources per rollout worker and per learner rank."""

    rollout: WorkerResources = Field(default_factory=WorkerResources, description="Per rollout worker.")
    learner: WorkerResources = Field(default_factory=WorkerResources, description="Per learner rank.")


class DistributedConfig(_Section):
    """Scale-out on a Ray cluster (needs the `ray` extra): rollout workers and a data-parallel learner."""

    engine: Literal["ray"] = Field("ray", description="Distributed engine (ray).")
    address: str = Field("local", description="'local' starts a Ray cluster in this process; 'auto' "
                                              "joins the running one (ray start --head); or HOST:PORT.")
    local_cpus: int | None = Field(None, ge=1, description="CPUs of a 'local' cluster (None = all).")
    rollout_workers: int = Field(2, ge=1, description="Rollout workers per base model; each runs the "
                                                      "lock-step runner on its share of a step's jobs.")
    learner_workers: int = Field(1, ge=1, description="Data-parallel learner ranks (gloo on CPU, "
                                                      "NCCL on GPU).")
    learner_strategy: Literal["ddp", "fsdp"] = Field(
        "ddp", description="ddp: every learner rank holds the whole base; fsdp: FSDP2 shards the base and "
                           "the LoRA parameters over the ranks, per decoder layer (for a base that does not "
                           "fit one device; same adapters within float rounding).")
    max_staleness: int = Field(0, ge=0, description="Optimiser steps a rollout worker's adapters may lag "
                                                    "behind the learner's (0 = always the latest).")
    max_restarts: int = Field(3, ge=0, description="Rollout-worker restarts allowed per step before "
                                                   "the step fails.")
    resources: DistributedResources = Field(default_factory=DistributedResources,
                                            description="Ray resources per worker.")


class TeamTrainingConfig(_Section):
    """The sections every run that trains a team sets: data, team, model, decoding, credit, loss,
    optimiser, rollouts, logs. ``TrainConfig`` adds what only a single run has (its length,
    evaluation schedule, checkpoints, controllers, Ray scale-out); ``FederatedConfig`` adds the
    federation, and builds each site's ``TrainConfig`` from these sections."""

    task: TaskConfig = Field(default_factory=lambda: TaskConfig(split="train"), description="Training items.")
    eval_task: TaskConfig | None = Field(None, description="Held-out items (None = no held-out eval).")
    protocol: ProtocolConfig = Field(default_factory=ProtocolConfig, description="Team protocol.")
    team: Team | None = Field(None, description="Roles; None uses the protocol's default team.")
    model: ModelConfig = Field(default_factory=ModelConfig, description="Base model and LoRA.")
    backend: BackendConfig = Field(default_factory=BackendConfig, description="Generation backend.")
    sampling: SamplingConfig = Field(
        default_factory=lambda: SamplingConfig(temperature=1.0), description="Decoding for training "
                                                                             "rollouts.")
    eval_sampling: SamplingConfig = Field(default_factory=SamplingConfig,
                                          description="Decoding for held-out evaluation (greedy).")
    credit: CreditConfig = Field(default_factory=CreditConfig, description="Credit assignment.")
    objective: ObjectiveConfig = Field(default_factory=ObjectiveConfig, description="Loss.")
    optim: OptimConfig = Field(default_factory=OptimConfig, description="Optimiser.")
    rollout: RolloutConfig = Field(default_factory=RolloutConfig, description="Rollout sizes.")
    alternate_roles_every: int | None = Field(
        None, ge=1, description="Train one adapter at a time, switching every k steps (None = all).")
    keep_checkpoints: int = Field(2, ge=1, description="Keep the last k checkpoints.")
    output_dir: str = Field("runs/train", description="Run folder.")
    seed: int = Field(0, description="Seed of data order, rollouts and minibatches.")
    log_episodes: int = Field(2, ge=0, description="Credited episodes per step written to "
                                                   "episodes.jsonl (for reports).")
    tensorboard: bool = Field(True, description="Also log metrics to TensorBoard.")
    wandb_project: str | None = Field(None, description="Also log to this wandb project (needs wandb).")

    @model_validator(mode="after")
    def _rollouts_can_train(self) -> TeamTrainingConfig:
        """Rules that involve several sections (checked at load, before any model is built)."""
        if self.backend.name == "scripted":
            raise ValueError("backend.name: training needs a model backend (hf or vllm), not 'scripted'")
        if self.sampling.temperature == 0 and self.rollout.group_size > 1:
            raise ValueError("sampling.temperature: training with group_size > 1 needs sampled decoding "
                             "(temperature > 0); greedy episodes of a group are identical")
        if self.sampling.top_p < 1 or self.sampling.top_k > 0:
            raise ValueError("sampling.top_p/top_k: training rollouts must sample the full distribution "
                             "(top_p=1, top_k=0) so the behaviour log-probs and the trainer's ratio refer "
                             "to the same policy")
        if self.team is not None:
            self.team.require_trainable()
        _check_backend_fits_model(self.backend, self.model)
        return self

    @model_validator(mode="after")
    def _token_credit_fits_objective(self) -> TeamTrainingConfig:
        token = self.credit.token
        if token is not None and self.objective.kl_beta > 0:
            from teamplay.credit.token import get_token_credit

            if get_token_credit(token.method).excludes_kl:
                raise ValueError(f"credit.token.method: {token.method!r} replaces the KL penalty; "
                                 f"set objective.kl_beta to 0")
        return self


class TrainConfig(TeamTrainingConfig):
    """A whole training run (`teamplay train`)."""

    controllers: ControllerConfig = Field(
        default_factory=ControllerConfig, description="Learned speak/skip controllers, trained by regret "
                                                      "matching alongside the adapters.")
    steps: int = Field(10, ge=1, description="Training steps.")
    token_budget: int | None = Field(
        None, ge=1, description="Stop after the step at which the run has generated this many tokens: its "
                                "episodes' plus the counterfactual ones of replays, continuations and "
                                "controllers (so methods can be compared at equal cost). `steps` stays "
                                "the upper bound and the LR schedule's length. None = `steps` only.")
    eval_every: int | None = Field(None, ge=1, description="Held-out eval every N steps (and at the "
                                                           "start and end); None = start and end only.")
    eval_curve_limit: int | None = Field(
        None, ge=1, description="Learning curve at a fraction of the cost: the evaluations every `eval_every` "
                                "steps use the first N held-out problems, and the run also logs "
                                "`heldout_curve` (those N problems) before training, at each of those steps "
                                "and after training. None = every evaluation uses every held-out problem.")
    eval_cache: str | None = Field(
        None, description="Folder that keeps the held-out evaluation of the untrained team for reuse by "
                          "every run it equals (same model, team, protocol, controllers, tasks, eval "
                          "decoding, backend and seed: credit, loss and optimiser cannot change it). "
                          "`teamplay sweep` sets it for its runs. None = each run evaluates.")
    checkpoint_every: int = Field(5, ge=1, description="Checkpoint every N steps (and at the end).")
    distributed: DistributedConfig | None = Field(
        None, description="Ray scale-out (rollout workers, data-parallel learner); None = one process.")

    @model_validator(mode="after")
    def _distributed_fits(self) -> TrainConfig:
        """What the Ray path (``teamplay.distributed``) cannot do yet, refused at load."""
        dist = self.distributed
        if dist is None:
            return self
        if self.controllers.enabled:
            raise ValueError("controllers.enabled: learned speak/skip controllers are not supported with "
                             "`distributed:` yet; set controllers.enabled=false or drop the distributed section")
        if dist.learner_strategy == "fsdp" and self.team is not None and len(self.team.bases(self.model.name)) > 1:
            raise ValueError("distributed.learner_strategy: fsdp shards one base model; a team whose roles use "
                             "several bases (team.roles[].model) needs learner_strategy: ddp")
        if dist.learner_workers > 1 and self.objective.name == "grpo" and self.objective.loss_agg == "token_mean":
            raise ValueError("objective.loss_agg: token_mean normalises by the token count of a whole minibatch "
                             "and does not split over learner ranks; use seq_mean_token_mean or "
                             "distributed.learner_workers=1")
        return self


class FedGrpoConfig(_Section):
    """Fed-GRPO's three mechanisms, each switchable for ablation (teamplay.federated.strategies)."""

    signal_weighting: bool = Field(True, description="Aggregation weight of a site proportional to its "
                                                     "within-group reward std this round (else data size).")
    weight_floor: float = Field(0.05, gt=0.0, description="Floor on a site's signal, so a site without "
                                                          "signal this round keeps a small weight.")
    calibration: bool = Field(True, description="Scale each problem's advantages by the gap between the "
                                                "global mean reward of its type and its group's mean.")
    calibration_strength: float = Field(1.0, ge=0.0, description="Slope of that scale per unit of reward gap.")
    calibration_clip: tuple[float, float] = Field((0.5, 2.0), description="Bounds [lo, hi] of that scale.")
    sparse: bool = Field(True, description="Upload the top-k entries of the update (with error feedback).")
    budget: float = Field(1.0, gt=0.0, le=1.0, description="B: global upload budget as a fraction of dense "
                                                           "entries, split across sites by signal (1 = dense).")


class RobustConfig(_Section):
    """How the server refuses outlying site updates and combines the rest (teamplay.federated.screen,
    teamplay.federated.strategies.AGGREGATORS)."""

    aggregator: Literal["mean", "median", "trimmed_mean", "clipped_mean"] = Field(
        "mean", description="mean: the strategy's weighted mean; median / trimmed_mean: coordinate-wise, "
                            "sites weighted equally (Flower's FedMedian / FedTrimmedAvg rules); clipped_mean: "
                            "each update clipped to clip_factor x the round's median norm, then the weighted mean.")
    trim_fraction: float = Field(0.2, ge=0.0, lt=0.5, description="trimmed_mean: share of sites cut from each "
                                                                  "tail per entry (floor(fraction x sites)).")
    clip_factor: float = Field(1.0, gt=0.0, description="clipped_mean: norm bound as a multiple of the round's "
                                                        "median update norm.")
    max_norm_ratio: float | None = Field(10.0, gt=1.0, description="Refuse an update whose norm exceeds this "
                                                                   "multiple of the round's median norm (3+ "
                                                                   "updates); null: no such check.")


class FailureDrill(_Section):
    """Make one site fail in one round (to rehearse fault handling; off unless listed)."""

    site: int = Field(..., ge=0, description="Site index (0-based).")
    round: int = Field(..., ge=1, description="Round in which it fails.")
    kind: Literal["raise", "nan"] = Field("raise", description="raise: the site raises; nan: its upload "
                                                               "carries NaN (the server must refuse it).")


class FederatedSection(_Section):
    """Sites, shards, rounds and the aggregation strategy of a federated run."""

    clients: int = Field(3, ge=1, description="K: number of sites (each a Flower SuperNode).")
    rounds: int = Field(2, ge=1, description="Federated rounds.")
    local_steps: int = Field(1, ge=1, description="S: ordinary training steps per site per round.")
    partition: Literal["iid", "by_key"] = Field("iid", description="iid, or by_key: non-IID shards sorted "
                                                                   "by a metadata key (label skew).")
    partition_key: str | None = Field("level", description="Metadata key of by_key shards and of problem "
                                                           "types for calibration (None = one type).")
    extra_tasks: list[TaskConfig] = Field(default_factory=list, description="More items of the same task "
                                                                            "joined to `task` before sharding, "
                                                                            "e.g. other arith levels.")
    strategy: Literal["fedavg", "fedgrpo"] = Field("fedgrpo", description="fedavg (data-size weights, dense) "
                                                                          "or fedgrpo.")
    fedgrpo: FedGrpoConfig = Field(default_factory=FedGrpoConfig, description="Fed-GRPO mechanisms.")
    robust: RobustConfig = Field(default_factory=RobustConfig, description="Outlier checks and robust "
                                                                          "aggregation.")
    min_sites: int = Field(1, ge=1, description="A round with fewer valid site results (after failures, "
                                                "timeouts and refused results) stops the run with an error.")
    round_timeout: float = Field(3600.0, gt=0.0, description="Seconds the server waits for a round's "
                                                             "replies; late sites are left out of it.")
    client_cpus: float = Field(1.0, gt=0.0, description="Simulation: CPUs per site (Ray actor).")
    failure_drills: list[FailureDrill] = Field(default_factory=list, description="Sites made to raise in a "
                                                                                 "round (fault rehearsal).")


_LENGTH = ("not used by a federated run (set federated.rounds and federated.local_steps; the global team "
           "is evaluated after every round)")
#: the fields only a single run has (``TrainConfig``'s own), and why a federated run has none of them
SINGLE_RUN_ONLY = {
    "steps": f"steps/eval_every: {_LENGTH}",
    "eval_every": f"steps/eval_every: {_LENGTH}",
    "token_budget": "token_budget: a federated run's length is federated.rounds x federated.local_steps; a "
                    "token budget would stop sites at different rounds",
    # the regret tables would have to be federated and kept per site: not built yet
    "controllers": "controllers{enabled}: learned speak/skip controllers are not supported in federated runs; "
                   "drop the controllers section",
    # each site is one process (a Flower SuperNode, or a Ray actor of the simulation)
    "distributed": "distributed: a federated run's sites train in one process each; drop the distributed "
                   "section (federated.clients sets how many sites run)",
    "checkpoint_every": "checkpoint_every: a federated run checkpoints the global team, and each site its "
                        "state, after every round; drop it",
    "eval_curve_limit": "eval_curve_limit: the server evaluates the global team on every held-out problem "
                        "after every round; drop it (or set eval_task.limit)",
    "eval_cache": "eval_cache: the server evaluates the untrained team once per run, not from a cache; drop it",
}


class FederatedConfig(TeamTrainingConfig):
    """A federated run (`teamplay federate`): the sections every site trains with, plus `federated`.

    Each site trains ``federated.local_steps`` ordinary steps per round, so its Trainer runs a
    ``TrainConfig`` of ``rounds * local_steps`` steps (``teamplay.federated.client.site_config``).
    The fields only a single run has (``SINGLE_RUN_ONLY``) are not here: a config that sets one is
    refused with one line saying why.
    """

    federated: FederatedSection = Field(default_factory=FederatedSection, description="Federation.")
    output_dir: str = Field("runs/federated", description="Run folder.")
    # the server logs each round to federated.jsonl and the sites log nothing, so a federated run has
    # no TensorBoard or wandb logs; ``FederatedServer`` refuses a config that asks for them (not this
    # model: run folders written before that still hold ``tensorboard: true`` and must still load)
    tensorboard: bool = Field(False, description="Must stay false: a federated run logs its rounds to "
                                                 "federated.jsonl only.")
    wandb_project: str | None = Field(None, description="Must stay unset: a federated run logs its rounds to "
                                                        "federated.jsonl only.")

    @model_validator(mode="before")
    @classmethod
    def _no_single_run_fields(cls, data: Any) -> Any:
        """A single run's field, refused with its reason (rather than pydantic's "unknown field")."""
        if isinstance(data, Mapping):
            for name, why in SINGLE_RUN_ONLY.items():
                if name in data:
                    enabled = isinstance(data[name], Mapping) and data[name].get("enabled") is True
                    raise ValueError(why.format(enabled=".enabled" if enabled else ""))
        return data

    @model_validator(mode="after")
    def _federation_fits(self) -> FederatedConfig:
        lo, hi = self.federated.fedgrpo.calibration_clip
        if not 0 < lo <= 1 <= hi:
            raise ValueError(f"federated.fedgrpo.calibration_clip: need 0 < lo <= 1 <= hi, got [{lo}, {hi}]")
        self._robust_fits()
        for drill in self.federated.failure_drills:
            if drill.site >= self.federated.clients:
                raise ValueError(f"federated.failure_drills: site {drill.site} does not exist "
                                 f"(clients: {self.federated.clients})")
        for extra in self.federated.extra_tasks:
            if extra.name != self.task.name:
                raise ValueError(f"federated.extra_tasks: task {extra.name!r} differs from task.name "
                                 f"{self.task.name!r}; one task (verifier) per run")
        return self

    def _robust_fits(self) -> None:
        fed, robust = self.federated, self.federated.robust
        if fed.min_sites > fed.clients:
            raise ValueError(f"federated.min_sites: {fed.min_sites} is more than the {fed.clients} sites "
                             f"(federated.clients)")
        if robust.aggregator == "trimmed_mean" and int(robust.trim_fraction * fed.clients) == 0:
            fix = f"raise it to at least {1 / fed.clients:.3g} or " if 1 / fed.clients < 0.5 else ""
            raise ValueError(f"federated.robust.trim_fraction: {robust.trim_fraction:g} of {fed.clients} sites "
                             f"trims nothing; {fix}use aggregator median")
        sparse = fed.strategy == "fedgrpo" and fed.fedgrpo.sparse and fed.fedgrpo.budget < 1
        if sparse and robust.aggregator in ("median", "trimmed_mean"):
            # a sparse upload is 0 outside its top-k entries, so per entry most values are 0
            raise ValueError(f"federated.robust.aggregator: {robust.aggregator} of sparse uploads (fedgrpo.budget "
                             f"{fed.fedgrpo.budget:g}) pulls every entry towards 0; set fedgrpo.budget=1 or "
                             f"aggregator mean/clipped_mean")

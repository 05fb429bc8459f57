"""The sections of who generates and how: the base model and its LoRA adapters (``model``), the
generation backend (``backend``) and decoding (``sampling``, ``eval_sampling``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from teamplay.config.base import Section

#: the sampling temperatures every backend accepts: vLLM refuses more than 2 and raises values in
#: (0, 0.01) to 0.01 (0 means greedy)
MIN_TEMPERATURE, MAX_TEMPERATURE = 0.01, 2.0


class LoraConfig(Section):
    """LoRA adapters (one per role adapter name) on the shared base model."""

    r: int = Field(8, ge=1, description="LoRA rank.")
    alpha: int = Field(16, ge=1, description="LoRA alpha (scale = alpha / r).")
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="LoRA dropout.")
    target_modules: str | list[str] = Field(
        "all-linear", description="Modules to adapt: 'all-linear' or a list of module names.")
    fused: bool = Field(True, description="Compute each plain LoRA layer (one adapter, no dropout, a dense "
                                          "linear base) as one product in the base's precision, with "
                                          "float32 adapter weights and gradients; false: peft's own "
                                          "forward (its float32 LoRA branch) everywhere.")


class ModelConfig(Section):
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


class VLLMEngineConfig(Section):
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


class BackendConfig(Section):
    """Generation backend."""

    name: Literal["hf", "vllm", "scripted"] = Field("hf", description="hf, vllm or scripted.")
    policy: str = Field("truthful", description="Scripted policy (scripted backend only): truthful, "
                                                "wrong, contrarian, echo, random, ... (or NAME(key=value)); "
                                                "see teamplay.agents.backends.scripted.")
    max_prompt_tokens: int = Field(1536, ge=16, description="Prompt budget; longer transcripts are "
                                                            "truncated by the stated rule.")
    max_batch: int | None = Field(None, ge=1, description="Most requests per generate call.")
    micro_batch_size: int = Field(16, ge=1, description="hf: most sequences in one forward pass of "
                                                        "generation (bounds memory; larger batches "
                                                        "decode more tokens per second on a CPU).")
    merge_adapters: bool = Field(True, description="hf: generate with each adapter merged into a "
                                                   "LoRA-free copy of the base model (faster decoding; "
                                                   "one more copy of the adapted weights in memory). "
                                                   "false: generate through peft's LoRA layers.")
    sampler: Literal["inverse_cdf", "multinomial"] = Field(
        "inverse_cdf", description="hf: how a sampled token is drawn. inverse_cdf: one uniform per row and "
                                   "a cumulative sum (fast on a CPU); multinomial: generate's own "
                                   "torch.multinomial, the draws of teamplay before inverse_cdf (same seed, "
                                   "same tokens as those runs).")
    gpu_memory_utilization: float = Field(0.5, gt=0.0, le=1.0, description="vllm: share of GPU memory the "
                                                                          "engine may take (the learner "
                                                                          "needs the rest).")
    enforce_eager: bool = Field(False, description="vllm: run without CUDA graphs (faster start, slower "
                                                   "decoding).")
    engine: VLLMEngineConfig = Field(default_factory=VLLMEngineConfig, description="vllm: further engine "
                                                                                   "arguments.")

    @field_validator("policy")
    @classmethod
    def _renamed_policy(cls, value: str) -> str:
        from teamplay.agents.backends.scripted import canonical_policy  # the policy registry

        return canonical_policy(value)  # an old policy name: one warning, the new name kept

    @model_validator(mode="after")
    def _engine_only_for_vllm(self) -> BackendConfig:
        if self.name != "vllm" and self.engine.model_dump(exclude_none=True):  # a dumped config holds Nones
            raise ValueError(f"backend.engine: vLLM engine arguments, but backend.name is {self.name!r}; "
                             f"set backend.name=vllm or drop backend.engine")
        return self


class SamplingConfig(Section):
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

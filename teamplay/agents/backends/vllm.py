"""Generation with vLLM: one engine, one ``LoRARequest`` per adapter, adapters reloaded after updates.

vLLM holds its own copy of the base weights (read from the folder the base model was loaded from)
and serves every adapter of the ``TeamModel`` as a multi-LoRA request, so requests of all roles
go into one ``LLM.generate`` call. The trained adapters live in the ``TeamModel``; after each
optimizer step ``sync_adapters()`` writes them with ``TeamModel.save_adapters`` into a new version
folder and gives each adapter a fresh LoRA id (vLLM caches adapters by id, so reusing an id would
keep serving the old weights; older versions leave vLLM's LRU cache as new ones arrive).

Prompts are built with the same chat template and truncation rule as the hf backend and sent as
token ids. Behaviour log-probs: ``logprobs=0`` returns the log-prob of each sampled token; the
engine is created with ``logprobs_mode="processed_logprobs"`` (vLLM >= 0.10.2) so that they come
from the temperature-scaled distribution that was sampled, as in the hf backend; pass
``logprobs_mode=None`` for an older vLLM (its log-probs are then those of the T=1 distribution).

vLLM is imported lazily: building this backend without vLLM raises ``ModelLoadError`` with the
install command.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from teamplay.agents.backends.base import GenerationBackend
from teamplay.agents.prompts import build_prompt_ids
from teamplay.errors import ConfigError, ModelLoadError
from teamplay.records import Generation, SamplingParams, TurnRequest

VLLM_INSTALL = "pip install 'teamplay[vllm]' (or pip install vllm) on a machine with a CUDA GPU"


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as err:
        raise ModelLoadError(f"the vllm backend needs vLLM, which is not installed ({err}); install it with: "
                             f"{VLLM_INSTALL}, or use backend 'hf'") from err
    return vllm


class VLLMBackend(GenerationBackend):
    """Multi-LoRA generation with a vLLM engine.

    Args:
        team_model: the ``TeamModel`` whose adapters are served (its base model must have been
            loaded from a folder or hub id vLLM can read: ``model_path`` overrides it).
        max_prompt_tokens: prompt budget (same truncation rule as the hf backend).
        model_path: base weights for vLLM; default ``team_model.base_model.name_or_path``.
        adapter_dir: where adapter versions are written; default a temporary folder removed by
            ``close()``.
        gpu_memory_utilization: fraction of GPU memory vLLM may take (the learner needs the rest).
        logprobs_mode: vLLM's ``logprobs_mode`` (see the module docstring); ``None`` omits it.
        **engine_kwargs: passed to ``vllm.LLM`` (``tensor_parallel_size``, ``max_model_len``, ...).
    """

    name = "vllm"

    def __init__(self, team_model: Any, max_prompt_tokens: int = 2048, model_path: str | None = None,
                 adapter_dir: str | Path | None = None, gpu_memory_utilization: float = 0.5,
                 logprobs_mode: str | None = "processed_logprobs", **engine_kwargs: Any) -> None:
        vllm = _import_vllm()
        from vllm.lora.request import LoRARequest

        self._vllm = vllm
        self._lora_request = LoRARequest
        self.team_model = team_model
        self.tokenizer = team_model.tokenizer
        self.max_prompt_tokens = max_prompt_tokens
        path = model_path or getattr(team_model.base_model, "name_or_path", "")
        if not path:
            raise ConfigError("the vllm backend needs the base model's folder or hub id: pass model_path")
        self.model_path = str(path)
        self._own_dir = adapter_dir is None
        self.adapter_dir = Path(adapter_dir or tempfile.mkdtemp(prefix="teamplay-vllm-"))
        names = team_model.adapter_names
        kwargs: dict[str, Any] = dict(model=self.model_path, tokenizer=self.model_path,
                                      gpu_memory_utilization=gpu_memory_utilization,
                                      dtype=str(team_model.base_model.dtype).removeprefix("torch."),
                                      **engine_kwargs)
        if names:
            kwargs.update(enable_lora=True, max_loras=len(names), max_lora_rank=_lora_rank(team_model.lora.r))
        if logprobs_mode is not None:
            kwargs["logprobs_mode"] = logprobs_mode
        try:
            self.llm = vllm.LLM(**kwargs)
        except (OSError, ValueError, RuntimeError) as err:
            raise ModelLoadError(f"vLLM could not load {self.model_path!r}: {err}") from err
        configured = _as_list(team_model.base_model.generation_config.eos_token_id)
        self.stop_ids = tuple(dict.fromkeys(
            i for i in (self.tokenizer.eos_token_id, *configured) if i is not None))
        self._version = 0
        self._next_id = 1
        self._requests: dict[str, Any] = {}
        self.sync_adapters()

    def adapters(self) -> tuple[str, ...]:
        return self.team_model.adapter_names

    def sync_adapters(self) -> None:
        """Write the current adapters as a new version and point every adapter name at it."""
        if not self.team_model.adapter_names:
            return
        folder = self.team_model.save_adapters(self.adapter_dir / f"v{self._version:06d}")
        previous = self.adapter_dir / f"v{self._version - 1:06d}"
        self._version += 1
        requests = {}
        for name in self.team_model.adapter_names:
            requests[name] = self._lora_request(f"{name}@{self._version}", self._next_id, str(folder / name))
            self._next_id += 1
        self._requests = requests
        # vLLM reads an adapter's files when a request first uses its id, so the previous version
        # (no longer referenced) can go.
        shutil.rmtree(previous, ignore_errors=True)

    def close(self) -> None:
        """Remove the temporary adapter folder (when this backend created it)."""
        if self._own_dir:
            shutil.rmtree(self.adapter_dir, ignore_errors=True)

    def generate(self, requests: Sequence[TurnRequest], sampling: SamplingParams) -> list[Generation]:
        """One ``Generation`` per request, in order; all adapters go into one engine call."""
        from vllm.inputs import TokensPrompt

        for r in requests:
            if r.adapter is not None and r.adapter not in self._requests:
                raise ConfigError(f"request of {r.agent} names adapter {r.adapter!r}; served: "
                                  f"{sorted(self._requests)}")
        prompts = [build_prompt_ids(self.tokenizer, r.chat, self.max_prompt_tokens) for r in requests]
        params = [self._sampling(sampling, i) for i in range(len(requests))]
        outputs = self.llm.generate(
            [TokensPrompt(prompt_token_ids=ids) for ids, _ in prompts], sampling_params=params,
            lora_request=[self._requests.get(r.adapter) if r.adapter else None for r in requests],
            use_tqdm=False)
        results = []
        for r, (ids, truncated), out in zip(requests, prompts, outputs, strict=True):
            completion = out.outputs[0]
            tokens = list(completion.token_ids)
            steps = completion.logprobs or []  # one {token id: Logprob} per generated token
            logps = [entry[token].logprob for token, entry in zip(tokens, steps, strict=True)]
            results.append(Generation(
                text=self.tokenizer.decode(tokens, skip_special_tokens=True), prompt_ids=tuple(ids),
                completion_ids=tuple(tokens), logprobs=tuple(logps), adapter=r.adapter, truncated=truncated))
        return results

    def _sampling(self, sampling: SamplingParams, index: int) -> Any:
        seed = None
        if sampling.seed is not None:  # one seed per request: same seed + same batch -> same output
            digest = hashlib.sha256(f"{sampling.seed}/{index}".encode()).digest()
            seed = int.from_bytes(digest[:4], "little") & 0x7FFF_FFFF
        return self._vllm.SamplingParams(
            max_tokens=sampling.max_new_tokens, temperature=sampling.temperature, top_p=sampling.top_p,
            top_k=sampling.top_k if sampling.top_k > 0 else -1, seed=seed, logprobs=0,
            stop_token_ids=list(self.stop_ids), skip_special_tokens=True)


def _as_list(value: Any) -> list[int]:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _lora_rank(r: int) -> int:
    """vLLM accepts only some maximal ranks; the smallest allowed one that fits ``r``."""
    for allowed in (8, 16, 32, 64, 128, 256, 320, 512):
        if r <= allowed:
            return allowed
    raise ConfigError(f"lora.r={r} is larger than vLLM's largest LoRA rank 512")

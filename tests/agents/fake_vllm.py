"""A stand-in for the ``vllm`` package, for CPU tests of the vllm backend's wiring.

``install(monkeypatch)`` puts modules ``vllm``, ``vllm.lora``, ``vllm.lora.request`` and
``vllm.inputs`` into ``sys.modules`` with the few names the backend uses: ``LLM`` (records its
keyword arguments, every ``generate`` call and whether ``llm_engine.engine_core.shutdown()`` stopped
it: ``shut_down``), ``SamplingParams`` (records its keyword arguments),
``LoRARequest`` and ``TokensPrompt``. What the fake engine generates is set by a ``script``
function ``(prompt_ids, params, lora_request) -> (token_ids, finish_reason)``; each step's
log-prob mapping holds the sampled token with log-prob ``-(j + 1) / 10`` (step ``j``) and a decoy
token with log-prob ``-0.01``, so a reader that took the most likely entry instead of the sampled
token's would be caught.
"""

from __future__ import annotations

import json
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DECOY = 259  # a token id the default script never samples


@dataclass
class Logprob:
    logprob: float
    rank: int | None = None


@dataclass
class LoRARequest:
    lora_name: str
    lora_int_id: int
    lora_path: str


@dataclass
class CompletionOutput:
    token_ids: list[int]
    logprobs: list[dict[int, Logprob]] | None
    finish_reason: str
    cumulative_logprob: float


@dataclass
class RequestOutput:
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]


@dataclass
class Call:
    """One ``LLM.generate`` call as the engine saw it."""

    prompts: list[list[int]]
    params: list[Any]
    loras: list[LoRARequest | None]
    kwargs: dict[str, Any] = field(default_factory=dict)


def default_script(prompt_ids: list[int], params: Any, lora: LoRARequest | None) -> tuple[list[int], str]:
    """``max_tokens`` byte tokens that depend on the prompt length; stopped by the length limit."""
    n = params.kwargs["max_tokens"]
    return [4 + (len(prompt_ids) + j) % 100 for j in range(n)], "length"


def install(monkeypatch: Any, version: str = "0.11.0", fail: BaseException | None = None,
            script: Any = default_script, cpu: bool | None = None) -> types.ModuleType:
    """Install the fake ``vllm``; returns it (``.engines`` lists every ``LLM`` built). ``cpu``:
    with a ``vllm.platforms`` module whose ``current_platform.is_cpu()`` says so (None: no such
    module, as in older releases)."""

    class SamplingParams:
        def __init__(self, **kwargs: Any) -> None:
            self.kwargs = kwargs

    class LLM:
        def __init__(self, **kwargs: Any) -> None:
            self.kwargs = kwargs
            self.calls: list[Call] = []
            self.shut_down = False
            self.llm_engine = types.SimpleNamespace(engine_core=types.SimpleNamespace(shutdown=self._shutdown))
            if fail is not None:
                raise fail
            module.engines.append(self)

        def _shutdown(self) -> None:
            self.shut_down = True

        def generate(self, prompts: list[dict], sampling_params: list[Any], lora_request: list[Any],
                     **kwargs: Any) -> list[RequestOutput]:
            ids = [list(p["prompt_token_ids"]) for p in prompts]
            self.calls.append(Call(ids, list(sampling_params), list(lora_request), kwargs))
            outputs = []
            for prompt, params, lora in zip(ids, sampling_params, lora_request, strict=True):
                tokens, reason = script(prompt, params, lora)
                steps = [{t: Logprob(-(j + 1) / 10, rank=2), DECOY: Logprob(-0.01, rank=1)}
                         for j, t in enumerate(tokens)]
                total = sum(step[t].logprob for step, t in zip(steps, tokens, strict=True))
                outputs.append(RequestOutput(prompt, [CompletionOutput(list(tokens), steps, reason, total)]))
            return outputs

    def tokens_prompt(prompt_token_ids: list[int]) -> dict:
        return {"prompt_token_ids": prompt_token_ids}

    module = types.ModuleType("vllm")
    module.__version__ = version
    module.LLM = LLM
    module.SamplingParams = SamplingParams
    module.engines = []
    lora = types.ModuleType("vllm.lora")
    request = types.ModuleType("vllm.lora.request")
    request.LoRARequest = LoRARequest
    inputs = types.ModuleType("vllm.inputs")
    inputs.TokensPrompt = tokens_prompt
    module.lora, lora.request, module.inputs = lora, request, inputs
    for name, mod in (("vllm", module), ("vllm.lora", lora), ("vllm.lora.request", request),
                      ("vllm.inputs", inputs)):
        monkeypatch.setitem(sys.modules, name, mod)
    if cpu is not None:
        platforms = types.ModuleType("vllm.platforms")
        platforms.current_platform = types.SimpleNamespace(is_cpu=lambda: cpu)
        module.platforms = platforms
        monkeypatch.setitem(sys.modules, "vllm.platforms", platforms)
    else:
        monkeypatch.setitem(sys.modules, "vllm.platforms", None)  # `import vllm.platforms` fails
    return module




def install_hf_engine(monkeypatch: Any, version: str = "0.11.0", unscaled_logprobs: bool = False) -> types.ModuleType:
    """Install the fake ``vllm`` with an engine that really generates, with transformers on the CPU.

    A stand-in with vLLM's semantics as the backend relies on them, for dry runs of
    ``scripts/gpu_check.py``: the base weights come from the ``model`` folder in ``dtype``; a
    ``LoRARequest`` is served from the files at its ``lora_path`` (read when its version is first
    used, so a reload only shows after a sync); ``logprobs=0`` returns the sampled token's log-prob
    of the temperature-scaled distribution (T=1 for greedy) and ``cumulative_logprob`` their sum;
    a per-request ``seed`` makes sampling reproducible. It is the hf backend underneath, so it
    proves the check's plumbing, not vLLM's numerics. ``unscaled_logprobs=True`` returns the
    log-probs of the T=1 distribution whatever the temperature (vLLM 0.10.1's behaviour).
    """
    module = install(monkeypatch, version=version)

    class HFEngine:
        def __init__(self, **kwargs: Any) -> None:
            from teamplay.agents.models import load_model

            self.kwargs = kwargs
            self.calls: list[Call] = []
            self.model, self.tokenizer = load_model(kwargs["model"], dtype=kwargs["dtype"])
            self.backend: Any = None  # an HFBackend over a TeamModel with the served adapters
            self.version: Path | None = None
            module.engines.append(self)

        def _serve(self, lora: LoRARequest | None) -> str | None:
            from peft import LoraConfig

            from teamplay.agents.backends.hf import HFBackend
            from teamplay.agents.team_model import TeamModel

            if lora is None:
                return None
            version, name = Path(lora.lora_path).parent, Path(lora.lora_path).name
            if self.backend is None:
                saved = LoraConfig.from_pretrained(lora.lora_path)
                names = tuple(json.loads((version / "team_adapters.json").read_text())["adapters"])
                team_model = TeamModel(self.model, self.tokenizer, names, r=saved.r, alpha=saved.lora_alpha,
                                       target_modules=sorted(saved.target_modules))
                self.backend = HFBackend(team_model, max_prompt_tokens=self.kwargs["max_model_len"])
            if version != self.version:
                self.backend.team_model.load_adapters(version)
                self.version = version
            return name

        def generate(self, prompts: list[dict], sampling_params: Any, lora_request: Any = None,
                     **kwargs: Any) -> list[RequestOutput]:
            import torch

            from teamplay.records import SamplingParams as TeamSampling

            ids = [list(p["prompt_token_ids"]) for p in prompts]
            params = sampling_params if isinstance(sampling_params, list) else [sampling_params] * len(ids)
            loras = lora_request if isinstance(lora_request, list) else [lora_request] * len(ids)
            self.calls.append(Call(ids, list(params), list(loras), kwargs))
            outputs = []
            for prompt, p, lora in zip(ids, params, loras, strict=True):
                adapter = self._serve(lora)
                if self.backend is None:
                    raise RuntimeError("the stand-in engine serves a base-model request only after a LoRA one")
                k = p.kwargs
                sampling = TeamSampling(max_new_tokens=k["max_tokens"], temperature=k.get("temperature", 1.0))
                ((tokens, logps, _),) = self.backend._generate_chunk([prompt], adapter, sampling, k.get("seed"))
                if unscaled_logprobs and tokens:
                    with torch.no_grad():
                        t1, _ = self.backend.team_model.completion_logprobs([prompt], [tokens], adapter)
                    logps = t1[0].tolist()
                steps = [{t: Logprob(lp)} for t, lp in zip(tokens, logps, strict=True)]
                reason = "length" if len(tokens) == k["max_tokens"] else "stop"
                outputs.append(RequestOutput(prompt, [CompletionOutput(tokens, steps, reason, float(sum(logps)))]))
            return outputs

    module.LLM = HFEngine
    return module


__all__ = ["DECOY", "Call", "LoRARequest", "Logprob", "default_script", "install", "install_hf_engine"]

"""A stand-in for the ``vllm`` package, for CPU tests of the vllm backend's wiring.

``install(monkeypatch)`` puts modules ``vllm``, ``vllm.lora``, ``vllm.lora.request`` and
``vllm.inputs`` into ``sys.modules`` with the few names the backend uses: ``LLM`` (records its
keyword arguments and every ``generate`` call), ``SamplingParams`` (records its keyword arguments),
``LoRARequest`` and ``TokensPrompt``. What the fake engine generates is set by a ``script``
function ``(prompt_ids, params, lora_request) -> (token_ids, finish_reason)``; each step's
log-prob mapping holds the sampled token with log-prob ``-(j + 1) / 10`` (step ``j``) and a decoy
token with log-prob ``-0.01``, so a reader that took the most likely entry instead of the sampled
token's would be caught.
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field
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
            script: Any = default_script) -> types.ModuleType:
    """Install the fake ``vllm``; returns it (``.engines`` lists every ``LLM`` built)."""

    class SamplingParams:
        def __init__(self, **kwargs: Any) -> None:
            self.kwargs = kwargs

    class LLM:
        def __init__(self, **kwargs: Any) -> None:
            self.kwargs = kwargs
            self.calls: list[Call] = []
            if fail is not None:
                raise fail
            module.engines.append(self)

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
    return module


__all__ = ["DECOY", "Call", "LoRARequest", "Logprob", "default_script", "install"]

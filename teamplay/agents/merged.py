"""Generation without LoRA layers: the team's base model with one adapter merged into its weights.

peft runs an adapter as a side path of every adapted linear layer (x -> A -> B, scaled, added to the
base layer's output): on the embedded model that is about 210 extra pairs of small matrix products
and dtype casts per forward pass. In decoding, where a step is one token per row, those side paths
are a large share of the step (BENCHMARKS "Rollout speed"). Generation needs no gradients, so the
adapter can instead be merged into the weights it adapts, ``W' = W + s * B @ A``, and the forward
pass is the plain model's.

``MergedAdapterModel`` keeps a structural copy of the base model that shares every tensor with it
(embeddings, norms, output head, buffers) except the weights of the adapted linear layers, which it
owns and fills with ``W + s * B @ A`` of one adapter at a time (``use(adapter)``; ``None``: ``W``
itself, the reference policy). The sum is formed in float32 and rounded once to the weights' dtype,
so in float32 the merged forward equals peft's up to float summation order, and in bfloat16 the
merged weight is one rounding of the exact sum (peft's path rounds ``W`` and adds the adapter's
output in float32: the two differ by bfloat16 rounding, as two bfloat16 runs of different shapes do).

A merge is redone only when the adapter changed since the last one: each LoRA tensor's version
counter (bumped by every in-place update: an optimizer step, ``load_adapters``) and storage are
compared with those the merge was made from, so an update is never missed and an unchanged adapter
is never merged twice.

The merged model computes the evaluation-mode policy: LoRA dropout is not applied (teamplay trains
with dropout 0 by default, and sampling from a dropped-out policy is rarely what a user means).

Memory: one more copy of the adapted linear weights (on the embedded model 107M of its 135M
parameters). Supported: plain LoRA on ``torch.nn.Linear`` layers (peft's default); ``unsupported``
says why a model is not (DoRA and other variants, adapted embeddings or convolutions).
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Hashable

import torch
from peft.tuners.lora import LoraLayer

from teamplay.agents.team_model import TeamModel


def unsupported(team_model: TeamModel) -> str | None:
    """Why ``team_model``'s adapters cannot be merged for generation, or None when they can."""
    if not team_model.adapter_names:
        return "the team model has no adapters"
    layers = _lora_layers(team_model.base_model)
    if not layers:
        return "the model has no LoRA layers"
    for name, layer in layers.items():
        if type(layer.get_base_layer()) is not torch.nn.Linear:
            return f"{name} adapts a {type(layer.get_base_layer()).__name__}, not a Linear layer"
        if getattr(layer, "lora_variant", None):
            return f"{name} uses a LoRA variant ({sorted(layer.lora_variant)}: DoRA or similar)"
        if getattr(layer, "fan_in_fan_out", False):
            return f"{name} stores its weight transposed (fan_in_fan_out)"
    return None


class MergedAdapterModel:
    """A LoRA-free copy of ``team_model``'s base model; ``use(adapter)`` merges that adapter into it.

    Args:
        team_model: the team whose adapters are merged; it is read, never changed. Raises
            ValueError when ``unsupported(team_model)`` gives a reason.

    Attributes:
        model: the plain causal LM to generate with (shares all but the adapted weights).
    """

    def __init__(self, team_model: TeamModel) -> None:
        reason = unsupported(team_model)
        if reason is not None:
            raise ValueError(f"cannot merge adapters for generation: {reason}")
        base = team_model.base_model
        # Every tensor is its own copy in the memo: deepcopy then copies the module tree only, and the
        # copy shares the base model's parameters and buffers.
        shared = {id(t): t for t in itertools.chain(base.parameters(), base.buffers())}
        plain = copy.deepcopy(base, shared)
        self._layers: dict[str, tuple[LoraLayer, torch.nn.Linear]] = {}
        for name, layer in _lora_layers(base).items():
            frozen = layer.get_base_layer()
            merged = torch.nn.Linear(frozen.in_features, frozen.out_features, bias=frozen.bias is not None,
                                     device="meta")
            merged.weight = torch.nn.Parameter(frozen.weight.detach().clone(), requires_grad=False)
            if frozen.bias is not None:
                merged.bias = frozen.bias  # never adapted: shared
            plain.set_submodule(name, merged)
            self._layers[name] = (layer, merged)
        plain.eval()
        self.model = plain
        self._key: Hashable = self._state_key(None)

    def use(self, adapter: str | None) -> torch.nn.Module:
        """Make ``model`` compute ``adapter``'s policy (None: the base model) and return it."""
        key = self._state_key(adapter)
        if key != self._key:
            self._merge(adapter)
            self._key = key
        return self.model

    @torch.no_grad()
    def _merge(self, adapter: str | None) -> None:
        for layer, merged in self._layers.values():
            weight = layer.get_base_layer().weight  # [out, in]
            if adapter is None or adapter not in layer.lora_A:
                merged.weight.copy_(weight)
                continue
            a = layer.lora_A[adapter].weight.float()  # [r, in]
            b = layer.lora_B[adapter].weight.float()  # [out, r]
            merged.weight.copy_(torch.addmm(weight.float(), b, a, alpha=layer.scaling[adapter]))

    def _state_key(self, adapter: str | None) -> Hashable:
        """What the merged weights of ``adapter`` depend on that can change: the LoRA tensors'
        storage and version counters (and scaling), in layer order; the base weights are frozen."""
        if adapter is None:
            return (None,)
        parts: list[object] = [adapter]
        for layer, _ in self._layers.values():
            if adapter in layer.lora_A:
                for t in (layer.lora_A[adapter].weight, layer.lora_B[adapter].weight):
                    parts += (t.data_ptr(), t._version)
                parts.append(layer.scaling[adapter])
        return tuple(parts)


def _lora_layers(model: torch.nn.Module) -> dict[str, LoraLayer]:
    """The LoRA layers of ``model`` by module name (outermost only)."""
    return {name: m for name, m in model.named_modules() if isinstance(m, LoraLayer)}

"""Adapter-only, versioned weight sync between the learner and the rollout workers.

After each optimiser step the learner publishes an ``AdapterWeights``: the LoRA tensors of every
adapter (a few MB per role even for a 7B base) tagged with a version. Workers load it in place
into their own ``TeamModel`` before generating; the frozen base weights never move. A version is
the number of trainer steps whose updates the adapters contain, so version ``v`` generates the
rollouts of step ``v`` when no staleness is allowed, and it survives a resume unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from peft import get_peft_model_state_dict, set_peft_model_state_dict


@dataclass(frozen=True)
class AdapterWeights:
    """The LoRA tensors of a team at one version.

    Fields:
        version: trainer steps contained in these adapters (>= 0).
        tensors: adapter name -> PEFT state dict (parameter name -> CPU tensor), as
            ``get_peft_model_state_dict`` names them (the keys of ``adapter_model.safetensors``).
    """

    version: int
    tensors: Mapping[str, Mapping[str, torch.Tensor]]

    @classmethod
    def of(cls, team_model, version: int, adapters: tuple[str, ...] | None = None) -> AdapterWeights:
        """Copy the adapters (all, or ``adapters``) of ``team_model`` to CPU."""
        names = team_model.adapter_names if adapters is None else adapters
        tensors = {name: {k: v.detach().to("cpu", copy=True).contiguous() for k, v in
                          get_peft_model_state_dict(_owner(team_model, name).model, adapter_name=name).items()}
                   for name in names}
        return cls(version=version, tensors=tensors)

    def apply(self, team_model) -> None:
        """Load every adapter into ``team_model`` in place (same parameter objects).

        Raises RuntimeError when a key does not match the model's adapter (a different LoRA shape).
        """
        for name, state in self.tensors.items():
            part = _owner(team_model, name)
            result = set_peft_model_state_dict(part.model, {k: v.to(part.device) for k, v in state.items()},
                                               adapter_name=name)
            if result.unexpected_keys:
                raise RuntimeError(f"adapter {name!r}: keys not in the model: {result.unexpected_keys[:3]}")

    @property
    def nbytes(self) -> int:
        """Bytes of tensor data one sync moves (per worker)."""
        return sum(t.numel() * t.element_size() for state in self.tensors.values() for t in state.values())


def _owner(team_model, adapter: str):
    """The single-base team model holding ``adapter`` (a multi-base team routes by adapter)."""
    return team_model.part(adapter) if hasattr(team_model, "part") else team_model


def full_weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of every parameter of ``model`` (base and adapters): what a full-weight sync moves."""
    return sum(p.numel() * p.element_size() for p in model.parameters())

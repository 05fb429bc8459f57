"""FSDP2 sharding of a learner rank's team model (``distributed.learner_strategy: fsdp``).

``shard_team_model`` applies torch's ``fully_shard`` to every decoder layer of the base (the
classes the model lists in ``_no_split_modules``) and then to the root (peft's ``LoraModel``,
whose call runs every forward), so each rank holds a 1/world slice (dim 0) of every weight: the
frozen base and the LoRA parameters alike. FSDP's reduce-scatter averages the ranks' gradients
(gloo has no pre-scaled sum, so the divide factor stays FSDP's); ``ShardedGroup`` multiplies them
by the world size before the optimiser step, giving the sum ``PolicyUpdater``'s share weights expect.

The rest moves between sharded and full tensors so that the driver and the checkpoints only ever
see full ones (the single-process format):

- ``full_adapters`` / ``full_optimizer_state`` gather (collectives: every rank calls them, in the
  same order; each returns the same full copy);
- ``load_full_adapters`` / ``shard_optimizer_state`` keep this rank's slice of full tensors
  (local slicing, no communication: every rank was sent the same full tensors).
"""

from __future__ import annotations

from typing import Any

import torch
from peft import get_peft_model_state_dict

from teamplay.distributed.weights import AdapterWeights
from teamplay.errors import ConfigError


def _dtensor():
    from torch.distributed.tensor import DTensor, distribute_tensor

    return DTensor, distribute_tensor


def shard_team_model(team_model) -> int:
    """Shard a single-base ``TeamModel`` in place over the default process group; returns the
    number of decoder layers sharded. Raises ConfigError when the model names no layer class."""
    from torch.distributed.fsdp import fully_shard

    lora_model = team_model.model.base_model  # peft LoraModel: its __call__ runs every forward
    hf_model = lora_model.model
    layer_classes = set(getattr(hf_model, "_no_split_modules", None) or ())
    layers = [m for m in hf_model.modules() if type(m).__name__ in layer_classes]
    if not layers:
        raise ConfigError(f"distributed.learner_strategy: fsdp shards per decoder layer, but "
                          f"{type(hf_model).__name__} lists no layer class (_no_split_modules); use ddp")
    for layer in layers:
        fully_shard(layer)
    fully_shard(lora_model)
    return len(layers)


def _full(value: torch.Tensor) -> torch.Tensor:
    DTensor, _ = _dtensor()
    value = value.full_tensor() if isinstance(value, DTensor) else value
    return value.detach().to("cpu", copy=True).contiguous()


def full_adapters(team_model, version: int) -> AdapterWeights:
    """``AdapterWeights.of`` for a sharded team model: the same keys, full CPU tensors."""
    tensors = {name: {k: _full(v) for k, v in get_peft_model_state_dict(team_model.model, adapter_name=name).items()}
               for name in team_model.adapter_names}
    return AdapterWeights(version=version, tensors=tensors)


def load_full_adapters(team_model, weights: AdapterWeights) -> None:
    """``AdapterWeights.apply`` for a sharded team model: each parameter keeps its own slice.

    Raises RuntimeError when the keys differ from the model's adapters (another LoRA shape)."""
    DTensor, distribute_tensor = _dtensor()
    for name, state in weights.tensors.items():
        # the state dict's values share storage with the parameters, so copying into them loads
        live = get_peft_model_state_dict(team_model.model, adapter_name=name)
        if set(live) != set(state):
            raise RuntimeError(f"adapter {name!r}: keys differ from the model's: "
                               f"{sorted(set(live) ^ set(state))[:3]}")
        with torch.no_grad():
            for key, target in live.items():
                full = state[key].to(dtype=target.dtype)
                if isinstance(target, DTensor):
                    part = distribute_tensor(full.to(target.device), target.device_mesh, target.placements,
                                             src_data_rank=None)
                    target.to_local().copy_(part.to_local())
                else:
                    target.copy_(full.to(target.device))


def full_optimizer_state(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The optimiser's ``state_dict`` with every sharded tensor gathered (the single-process format)."""
    sd = optimizer.state_dict()
    state = {idx: {k: _full(v) if isinstance(v, torch.Tensor) and v.dim() > 0 else v for k, v in s.items()}
             for idx, s in sd["state"].items()}
    return {"state": state, "param_groups": sd["param_groups"]}


def shard_optimizer_state(optimizer: torch.optim.Optimizer, params: list[torch.nn.Parameter]) -> None:
    """After ``load_state_dict`` of a full state: each moment becomes this rank's slice, placed as
    its parameter (AdamW cannot mix a sharded parameter with a full moment)."""
    DTensor, distribute_tensor = _dtensor()
    for p in params:
        if not isinstance(p, DTensor):
            continue
        state = optimizer.state.get(p, {})
        for key, value in list(state.items()):
            if isinstance(value, torch.Tensor) and not isinstance(value, DTensor) and value.shape == p.shape:
                state[key] = distribute_tensor(value.to(p.device), p.device_mesh, p.placements, src_data_rank=None)

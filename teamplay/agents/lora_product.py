"""A LoRA layer's forward and backward as one product in the base layer's precision.

peft computes a LoRA layer ``y = x W^T + s (x A^T) B^T`` of a bfloat16 base with float32 adapters as
the base product in bfloat16, then the input cast to float32, two float32 products, a pass for the
scaling ``s``, a float32 add and a cast back to bfloat16: four passes over the [N, out] output
besides the products, and as many again in the backward. Measured on the demo's update (bfloat16 on
a 2-core CPU with AMX), those passes made a LoRA layer's forward and backward cost three times its
base product's.

``LoraProduct`` computes the same layer with the adapter's weights cast to the input's dtype (the
float32 weights stay the ones the optimizer updates; only the products run in the base's precision,
as under ``torch.autocast``): ``xa = x A^T`` is [N, r], and the output is one ``addmm`` that adds
``xa (s B)^T`` to the base product while writing it. The backward is written out the same way:
``g (s B)`` [N, r] once, then the input's gradient, ``A``'s and ``B``'s from it. In float32 the
values equal peft's up to summation order; in bfloat16 they differ by bfloat16 rounding of the
rank-r intermediate (``tests/agents/test_lora_product.py`` bounds both).

``fuse_lora_layers`` installs it on every peft LoRA ``Linear`` of a model; each call checks that the
layer is the plain case (one active adapter, plain LoRA without dropout, a plain ``nn.Linear`` base
with dense weights, adapters neither disabled nor merged, no autocast) and otherwise runs peft's own
forward, so DoRA, dropout, mixed-adapter batches, quantised or sharded layers keep peft's path.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

#: the per-instance forward this module installs (so installing twice is a no-op)
_INSTALLED = "_teamplay_lora_product"


class LoraProduct(torch.autograd.Function):
    """``y = x W^T + b + s (x A^T) B^T`` with the products in ``x``'s dtype.

    Shapes: ``x`` [..., in], ``weight`` [out, in], ``bias`` [out] or None, ``lora_a`` [r, in],
    ``lora_b`` [out, r]; returns [..., out] in ``x``'s dtype. The gradients of ``lora_a`` and
    ``lora_b`` come back in their own dtype (float32 adapters get float32 gradients, computed from
    products in ``x``'s dtype); the base weight and bias get none (they are frozen).
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                lora_a: torch.Tensor, lora_b: torch.Tensor, scaling: float) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])  # [N, in]
        a = lora_a.to(x.dtype)  # [r, in]
        b_scaled = (lora_b * scaling).to(x.dtype)  # [out, r]
        xa = flat @ a.t()  # [N, r]
        y = torch.addmm(torch.nn.functional.linear(flat, weight, bias), xa, b_scaled.t())  # [N, out]
        ctx.save_for_backward(flat, weight, a, b_scaled, xa)
        ctx.scaling = scaling
        ctx.in_shape = x.shape
        ctx.adapter_dtypes = (lora_a.dtype, lora_b.dtype)
        return y.view(*x.shape[:-1], weight.shape[0])

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad: torch.Tensor):
        flat, weight, a, b_scaled, xa = ctx.saved_tensors
        g = grad.reshape(-1, grad.shape[-1]).to(flat.dtype)  # [N, out]
        needs_x, _, _, needs_a, needs_b, _ = ctx.needs_input_grad
        gb = g @ b_scaled if (needs_x or needs_a) else None  # [N, r]: the gradient of xa
        grad_x = torch.addmm(g @ weight, gb, a).view(ctx.in_shape) if needs_x else None  # [..., in]
        grad_a = (gb.t() @ flat).to(ctx.adapter_dtypes[0]) if needs_a else None  # [r, in]
        # d y / d B = s * xa: the scaling applied once to the [out, r] result
        grad_b = (g.t() @ xa).mul_(ctx.scaling).to(ctx.adapter_dtypes[1]) if needs_b else None  # [out, r]
        return grad_x, None, None, grad_a, grad_b, None


def fuse_lora_layers(model: torch.nn.Module) -> int:
    """Run every peft LoRA ``Linear`` of ``model`` through ``LoraProduct`` where the layer is the plain
    case (see the module docstring), peft's own forward otherwise. Returns how many layers it
    installed on (layers already installed are left as they are)."""
    from peft.tuners.lora.layer import Linear as LoraLinear

    count = 0
    for module in model.modules():
        if isinstance(module, LoraLinear) and not getattr(module, _INSTALLED, False):
            module.forward = _fused_forward.__get__(module)
            setattr(module, _INSTALLED, True)
            count += 1
    return count


def unfuse_lora_layers(model: torch.nn.Module) -> int:
    """Undo ``fuse_lora_layers``: every LoRA layer of ``model`` runs peft's own forward again.
    Returns how many layers it restored."""
    count = 0
    for module in model.modules():
        if getattr(module, _INSTALLED, False):
            del module.forward  # the instance attribute; the class's forward shows through again
            delattr(module, _INSTALLED)
            count += 1
    return count


def _fused_forward(self, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    """A peft LoRA ``Linear``'s forward: ``LoraProduct`` for the plain case, peft's otherwise."""
    adapter = _plain_adapter(self, x) if not (args or kwargs) else None
    if adapter is None:
        return type(self).forward(self, x, *args, **kwargs)
    base = self.base_layer
    return LoraProduct.apply(x, base.weight, base.bias, self.lora_A[adapter].weight,
                             self.lora_B[adapter].weight, self.scaling[adapter])


def _plain_adapter(layer, x: torch.Tensor) -> str | None:
    """The layer's one active adapter when ``LoraProduct`` computes exactly what peft would, else None."""
    if layer.disable_adapters or layer.merged or torch.is_autocast_enabled(x.device.type):
        return None
    active = layer.active_adapters
    if len(active) != 1 or active[0] not in layer.lora_A:
        return None
    name = active[0]
    base = layer.base_layer
    if (type(base) is not torch.nn.Linear or name in getattr(layer, "lora_variant", {})
            or not isinstance(layer.lora_dropout[name], torch.nn.Identity)
            or layer.lora_B[name].bias is not None or x.dtype != base.weight.dtype
            or not x.is_floating_point()):
        return None
    tensors = (base.weight, layer.lora_A[name].weight, layer.lora_B[name].weight)
    if any(_is_sharded(t) or t.device != x.device for t in tensors):
        return None
    return name


def _is_sharded(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is a distributed tensor (FSDP2 shards parameters into ``DTensor``s)."""
    dtensor = _dtensor_type()
    return dtensor is not None and isinstance(tensor, dtensor)


@functools.cache
def _dtensor_type() -> type | None:
    """torch's ``DTensor`` class, imported once (every fused layer checks its weights on every call),
    or None where torch has no distributed package."""
    if not torch.distributed.is_available():
        return None
    from torch.distributed.tensor import DTensor

    return DTensor

"""The log-probs of chosen tokens through a float32 output head, with one [N, V] tensor instead of five.

Scoring a completion needs ``log_softmax(head(h) / T)[target]`` for each of its N real tokens. Written
as those operations, autograd keeps the logits, their scaled copy and the log-softmax ([N, V] each,
V = 49,152 for the embedded model), and the backward allocates as many again (a zero tensor for
the gather, the softmax's gradient, the division's). On the demo's update those allocations and
passes over [N, V] float32 cost as much as the head's product itself.

``HeadLogprobs`` computes the same values with one [N, V] buffer: the logits of ``h / T`` (the
temperature folded into the [N, D] input), turned into the softmax in place and kept for the
backward, which turns it into the logits' gradient in place (``onehot - softmax``, scaled by the
incoming gradient) before one product with the head's weight. Values and gradients equal the
unfused operations up to float32 rounding (``tests/agents/test_head_logprobs.py``).
"""

from __future__ import annotations

from typing import Any

import torch


class HeadLogprobs(torch.autograd.Function):
    """``log_softmax((h W^T + b) / T)[target]`` per row, for a frozen head.

    Shapes: ``states`` [N, D] (any float dtype; cast to the head's), ``weight`` [V, D], ``bias`` [V]
    or None, ``targets`` [N] (long); returns [N] in the head's dtype. Only ``states`` gets a
    gradient. The saved softmax is consumed by the backward, so the graph cannot be run backward
    twice (``retain_graph`` raises).
    """

    @staticmethod
    def forward(ctx: Any, states: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                targets: torch.Tensor, temperature: float) -> torch.Tensor:
        scaled = states.to(weight.dtype) / temperature  # [N, D]
        z = torch.nn.functional.linear(scaled, weight, None if bias is None else bias / temperature)  # [N, V]
        chosen = z.gather(1, targets[:, None]).squeeze(1)  # [N]
        peak = z.amax(dim=1, keepdim=True)  # [N, 1]
        probs = z.sub_(peak).exp_()  # [N, V], unnormalised, in place
        total = probs.sum(dim=1, keepdim=True)  # [N, 1]
        probs.div_(total)  # the softmax
        ctx.save_for_backward(weight, targets, probs)
        ctx.temperature = temperature
        ctx.states_dtype = states.dtype
        ctx.consumed = False
        return chosen - peak.squeeze(1) - total.log().squeeze(1)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad: torch.Tensor):
        if ctx.consumed:
            raise RuntimeError("HeadLogprobs' backward ran twice: its softmax buffer is reused in place "
                               "(score again instead of retain_graph)")
        ctx.consumed = True
        weight, targets, probs = ctx.saved_tensors
        g = grad.to(probs.dtype)[:, None]  # [N, 1]
        # d out / d z = onehot(target) - softmax, per row, times the incoming gradient
        dz = probs.mul_(-g).scatter_add_(1, targets[:, None], g)  # [N, V], in place
        grad_states = (dz @ weight).div_(ctx.temperature).to(ctx.states_dtype)  # [N, D]
        return grad_states, None, None, None, None


def head_logprobs(states: torch.Tensor, head: torch.nn.Module, targets: torch.Tensor,
                  temperature: float) -> torch.Tensor:
    """Log-probs [N] of ``targets`` [N] under ``head(states) / temperature`` (``states`` [N, D]),
    float32. A frozen float32 ``nn.Linear`` head runs through ``HeadLogprobs``; any other head
    (bfloat16, trainable, wrapped) through its own forward and ``log_softmax``."""
    weight = getattr(head, "weight", None)
    if (type(head) is torch.nn.Linear and weight is not None and weight.dtype == torch.float32
            and not weight.requires_grad and (head.bias is None or not head.bias.requires_grad)):
        return HeadLogprobs.apply(states, weight, head.bias, targets, temperature)
    return logits_logprobs(head(states), targets, temperature)


def logits_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float) -> torch.Tensor:
    """Float32 log-probs [N] of ``targets`` [N] under ``logits`` [N, V] divided by ``temperature``:
    the unfused path (the logits, their scaled copy and the log-softmax each an [N, V] tensor)."""
    return torch.log_softmax(logits.float() / temperature, dim=-1).gather(-1, targets[:, None]).squeeze(-1)

"""grpo_loss with a KL term: garbage in padded positions never reaches a gradient."""

from __future__ import annotations

import math

import pytest
import torch

from teamplay.training.losses import grpo_loss


@pytest.mark.parametrize("garbage", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("where", ["logp", "ref", "old"])
def test_padding_garbage_gives_finite_gradient(garbage, where):
    # row 0 has 2 real tokens, row 1 has 1; position (1, 1) is padding and holds the garbage
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    logp = torch.tensor([[-1.0, -2.0], [-0.5, 0.0]])
    ref = torch.tensor([[-1.2, -1.5], [-0.7, 0.0]])
    old = logp.clone()
    {"logp": logp, "ref": ref, "old": old}[where][1, 1] = garbage
    leaf = logp.clone().requires_grad_(True)
    loss, stats = grpo_loss(leaf, old, ref, torch.tensor([1.0, -1.0]), mask, beta=0.1)
    loss.backward()
    assert torch.isfinite(loss) and stats.kl_mean is not None and math.isfinite(stats.kl_mean)
    assert torch.isfinite(leaf.grad).all(), leaf.grad
    assert leaf.grad[1, 1] == 0.0  # padding gets no gradient at all


def test_padding_does_not_change_the_gradient_of_real_tokens():
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    base = torch.tensor([[-1.0, -2.0], [-0.5, 0.0]])
    ref = torch.tensor([[-1.2, -1.5], [-0.7, 0.0]])
    grads = []
    for pad in (0.0, math.inf):
        r = ref.clone()
        r[1, 1] = pad
        leaf = base.clone().requires_grad_(True)
        grpo_loss(leaf, base, r, torch.tensor([1.0, -1.0]), mask, beta=0.1)[0].backward()
        grads.append(leaf.grad)
    assert torch.equal(grads[0], grads[1])

"""Garbage (NaN, inf) in padded positions never reaches a loss or a gradient: grpo_loss with a KL
term, and every objective with token-level advantages."""

from __future__ import annotations

import math

import pytest
import torch

from teamplay.training.learn.losses import grpo_loss, gspo_loss


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
    # exact: padding is selected away, not multiplied: same ops on the real tokens
    assert torch.equal(grads[0], grads[1])


GARBAGE = (math.nan, math.inf, -math.inf)


def _token_batch():
    """Two rows, 3 and 1 real tokens: positions (1, 1) and (1, 2) are padding."""
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    logp = torch.tensor([[-1.0, -2.0, -0.3], [-0.5, 0.0, 0.0]])
    old = torch.tensor([[-1.1, -1.7, -0.3], [-0.2, 0.0, 0.0]])
    ref = torch.tensor([[-1.2, -1.5, -0.4], [-0.7, 0.0, 0.0]])
    adv = torch.tensor([[1.0, 0.5, -0.25], [-1.0, 0.0, 0.0]])  # token-level credit, [B, L]
    return mask, logp, old, ref, adv


def _loss_and_grad(loss_fn, garbage):
    """Loss and d loss / d logp with ``garbage`` planted in every padded position of the advantages
    and of the log-probs (current, behaviour, reference); ``None``: the clean batch."""
    mask, logp, old, ref, adv = _token_batch()
    if garbage is not None:
        pad = ~mask.bool()
        for t in (logp, old, ref, adv):
            t[pad] = garbage
    leaf = logp.clone().requires_grad_(True)
    loss = loss_fn(leaf, old, ref, adv, mask)
    loss.backward()
    return loss.detach(), leaf.grad


LOSSES = {
    "grpo seq_mean_token_mean + kl": lambda lp, old, ref, adv, m: grpo_loss(lp, old, ref, adv, m, beta=0.1)[0],
    "grpo token_mean": lambda lp, old, ref, adv, m: grpo_loss(lp, old, None, adv, m, loss_agg="token_mean")[0],
    "grpo dr_grpo + dual clip": lambda lp, old, ref, adv, m: grpo_loss(
        lp, old, None, adv, m, loss_agg="seq_mean_token_sum_norm", norm_tokens=4, dual_clip=3.0)[0],
    "gspo token": lambda lp, old, ref, adv, m: gspo_loss(lp, old, adv, m, eps_low=0.1, eps_high=0.1)[0],
}


@pytest.mark.parametrize("garbage", GARBAGE)
@pytest.mark.parametrize("name", sorted(LOSSES))
def test_nonfinite_padding_in_token_advantages_changes_nothing(name, garbage):
    # NaN * 0 is NaN: masking by multiplication would make this loss NaN; selection keeps it exact
    clean_loss, clean_grad = _loss_and_grad(LOSSES[name], None)
    loss, grad = _loss_and_grad(LOSSES[name], garbage)
    assert torch.isfinite(clean_loss) and torch.isfinite(clean_grad).all()
    # exact: padding is selected away, not multiplied: same ops on the real tokens
    assert torch.equal(loss, clean_loss), (loss, clean_loss)
    # exact: padding is selected away, not multiplied: same ops on the real tokens
    assert torch.equal(grad, clean_grad), (grad, clean_grad)
    assert grad[1, 1] == grad[1, 2] == 0.0


def test_a_nonfinite_real_advantage_is_loud():
    # only padding is forgiven: a NaN on a real token must not be silently zeroed
    mask, logp, old, ref, adv = _token_batch()
    adv[0, 1] = math.nan
    loss, _ = grpo_loss(logp.clone().requires_grad_(True), old, None, adv, mask)
    assert torch.isnan(loss)

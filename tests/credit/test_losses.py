"""GRPO / GSPO losses and the k3 KL (docs/credit/specification.md#grpo-loss, §1.3), values and gradients."""

import math

import pytest
import torch

from teamplay.training.learn.losses import LossStats, grpo_loss, gspo_loss, k3_kl


def test_k3_values():
    # d = -1.2 - (-1.0) = -0.2: exp(-0.2) + 0.2 - 1 = 0.818731 + 0.2 - 1 = 0.0187308
    assert k3_kl(torch.tensor(-1.0), torch.tensor(-1.2)).item() == pytest.approx(0.0187308, abs=1e-6)
    # exact: exp(0) + 0 - 1 = 0 on every libm
    assert k3_kl(torch.tensor([-0.3, -2.0]), torch.tensor([-0.3, -2.0])).tolist() == [0.0, 0.0]


def _token_example():
    logp = torch.tensor([[-1.0, -0.5, -2.0]], dtype=torch.float64, requires_grad=True)
    old = torch.tensor([[-1.2, -0.5, -1.5]], dtype=torch.float64)
    return logp, old, torch.ones(1, 3)


def test_grpo_token_example_value_and_stats():
    # ratios exp([0.2, 0, -0.5]) = [1.221403, 1, 0.606531]; A = 1, eps 0.2: min(rho, clip(rho)) =
    # [1.2, 1, 0.606531]; mean = 2.806531 / 3 = 0.935510; loss = -0.935510.
    logp, old, mask = _token_example()
    loss, stats = grpo_loss(logp, old, None, torch.tensor([1.0], dtype=torch.float64), mask, eps=0.2)
    assert loss.item() == pytest.approx(-0.935510, abs=1e-6)
    assert isinstance(stats, LossStats)
    assert stats.clip_fraction == pytest.approx(1 / 3)  # only token 0 is clipped
    assert stats.ratio_mean == pytest.approx((1.221403 + 1 + 0.606531) / 3, abs=1e-6)
    assert stats.kl_mean is None


def test_grpo_gradient_zero_on_clipped_token():
    # d loss / d logp_t = -(1/3) * rho_t * A on unclipped tokens, 0 on the clipped one.
    logp, old, mask = _token_example()
    loss, _ = grpo_loss(logp, old, None, torch.tensor([1.0], dtype=torch.float64), mask)
    loss.backward()
    assert logp.grad[0, 0].item() == 0.0  # exact: the clipped branch is a constant: its gradient is 0
    assert logp.grad[0, 1].item() == pytest.approx(-1 / 3, abs=1e-12)
    assert logp.grad[0, 2].item() == pytest.approx(-math.exp(-0.5) / 3, abs=1e-12)


def test_grpo_kl_term_and_eps_high():
    # KL on one token, logp = -1.0, ref = -1.2: k3 = 0.0187308; beta 0.5 -> loss = -(1 - 0.5 k3).
    logp = torch.tensor([[-1.0]], dtype=torch.float64, requires_grad=True)
    same = logp.detach().clone()
    ref = torch.tensor([[-1.2]], dtype=torch.float64)
    loss, stats = grpo_loss(logp, same, ref, torch.tensor([1.0]), torch.ones(1, 1), beta=0.5)
    assert loss.item() == pytest.approx(-(1 - 0.5 * 0.0187308), abs=1e-6)
    assert stats.kl_mean == pytest.approx(0.0187308, abs=1e-6)
    # clip-higher: eps_high 0.3 lets ratio 1.221403 through unclipped -> mean (1.221403+1+0.606531)/3
    logp2, old, mask = _token_example()
    loss2, _ = grpo_loss(logp2, old, None, torch.tensor([1.0]), mask, eps=0.2, eps_high=0.3)
    assert loss2.item() == pytest.approx(-(1.221403 + 1 + 0.606531) / 3, abs=1e-6)


def test_grpo_aggregation_and_padding():
    # two sequences: [a] (1 token, term 1*2 = 2) and [b, b, pad] (2 tokens, term 1*(-1) each).
    # seq_mean_token_mean: (2 + (-1)) / 2 = 0.5; token_mean: (2 - 1 - 1) / 3 = 0.
    logp = torch.zeros(2, 3)
    logp[0, 1:] = float("nan")  # padding garbage must not leak
    logp[1, 2] = float("inf")
    old = torch.zeros(2, 3)
    mask = torch.tensor([[1, 0, 0], [1, 1, 0]])
    adv = torch.tensor([2.0, -1.0])
    assert grpo_loss(logp, old, None, adv, mask)[0].item() == pytest.approx(-0.5)
    assert grpo_loss(logp, old, None, adv, mask, loss_agg="token_mean")[0].item() == pytest.approx(0.0)


def test_grpo_rejects_bad_input():
    logp, old, mask = _token_example()
    with pytest.raises(ValueError, match="logp_ref"):
        grpo_loss(logp, old, None, torch.tensor([1.0]), mask, beta=0.1)
    with pytest.raises(ValueError, match="no tokens"):
        grpo_loss(logp, old, None, torch.tensor([1.0]), torch.zeros(1, 3))
    with pytest.raises(ValueError, match="shape"):
        grpo_loss(logp, old[:, :2], None, torch.tensor([1.0]), mask)
    with pytest.raises(ValueError, match="loss_agg"):
        grpo_loss(logp, old, None, torch.tensor([1.0]), mask, loss_agg="sum")


def _gspo_example():
    # sequences of |y| = [10, 20, 5, 8] tokens with summed log-probs old [-10,-20,-15,-8],
    # new [-9,-21,-15.5,-8], spread evenly over their tokens, padded to L = 20.
    lengths, old_tot, new_tot = [10, 20, 5, 8], [-10, -20, -15, -8], [-9, -21, -15.5, -8]
    mask = torch.zeros(4, 20, dtype=torch.float64)
    old = torch.zeros(4, 20, dtype=torch.float64)
    new = torch.zeros(4, 20, dtype=torch.float64)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
        old[i, :n] = old_tot[i] / n
        new[i, :n] = new_tot[i] / n
    return new.requires_grad_(True), old, mask, torch.tensor([1.0, -1.0, -1.0, 1.0], dtype=torch.float64)


def test_gspo_tracer_clip():
    # s = exp([0.1, -0.05, -0.1, 0]) = [1.105171, 0.951229, 0.904837, 1]; eps 0.1: terms
    # [1.1, -0.951229, -0.904837, 1.0]; mean = 0.243934 / 4 = 0.0609834 -> loss -0.0609833.
    new, old, mask, adv = _gspo_example()
    loss, stats = gspo_loss(new, old, adv, mask, eps_low=0.1, eps_high=0.1, logratio_clamp=2.0)
    assert loss.item() == pytest.approx(-0.0609833, abs=1e-6)
    assert stats.clip_fraction == pytest.approx(0.25)
    assert stats.ratio_mean == pytest.approx((1.105171 + 0.951229 + 0.904837 + 1) / 4, abs=1e-6)
    loss.backward()
    assert new.grad[0].abs().sum().item() == 0.0  # exact: the clipped branch is a constant: no gradient
    # unclipped sequence 1 (A=-1): d(-mean_i s_i A_i)/d logp_t = s_1 / (4 * 20) per token
    assert new.grad[1, 0].item() == pytest.approx(0.951229 / 80, abs=1e-7)
    assert new.grad[1, 19].item() == pytest.approx(0.951229 / 80, abs=1e-7)


def test_gspo_paper_clip():
    # eps 3e-4 / 4e-4: clipped s [1.0004, 0.9997, 0.9997, 1.0]; terms [1.0004, -0.9997, -0.9997, 1]
    # -> mean 0.001 / 4 = 0.00025 -> loss -0.00025.
    new, old, mask, adv = _gspo_example()
    loss, stats = gspo_loss(new, old, adv, mask)
    assert loss.item() == pytest.approx(-0.00025, abs=1e-9)
    assert stats.clip_fraction == pytest.approx(0.75)


def test_gspo_identity_and_clamp():
    # logp == logp_old -> s = 1 -> loss = -mean(A)
    logp = torch.randn(3, 4, dtype=torch.float64)
    adv = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64)
    loss, stats = gspo_loss(logp, logp.clone(), adv, torch.ones(3, 4))
    assert loss.item() == pytest.approx(-adv.mean().item(), abs=1e-12)
    assert stats.ratio_mean == pytest.approx(1.0)
    # TRACER clamp: a mean log-ratio of +50 becomes +2, NaN becomes 0 (s = 1).
    new = torch.tensor([[50.0], [float("nan")]], dtype=torch.float64)
    old = torch.zeros(2, 1, dtype=torch.float64)
    _, st = gspo_loss(new, old, torch.tensor([1.0, 1.0]), torch.ones(2, 1), 0.1, 0.1, logratio_clamp=2.0)
    assert st.ratio_mean == pytest.approx((math.exp(2.0) + 1.0) / 2)


def test_gspo_bound_invariant():
    # term <= (1 + eps_high) A for A > 0 and <= (1 - eps_low) A for A < 0, for any ratio.
    torch.manual_seed(0)
    new = torch.randn(64, 5, dtype=torch.float64)
    old = torch.randn(64, 5, dtype=torch.float64)
    adv = torch.randn(64, dtype=torch.float64)
    for i in range(64):
        loss, _ = gspo_loss(new[i:i + 1], old[i:i + 1], adv[i:i + 1], torch.ones(1, 5), 0.2, 0.3)
        a = adv[i].item()
        bound = (1.3 if a > 0 else 0.8) * a
        assert -loss.item() <= bound + 1e-12


def test_gspo_rejects_bad_input():
    new, old, mask, adv = _gspo_example()
    with pytest.raises(ValueError, match="one advantage per sequence"):
        gspo_loss(new, old, adv[:3], mask)
    mask[2] = 0
    with pytest.raises(ValueError, match="row 2"):
        gspo_loss(new, old, adv, mask)


def test_grpo_per_token_advantages_equal_broadcast():
    torch.manual_seed(1)
    logp = torch.randn(3, 4, dtype=torch.float64)
    old = logp + 0.3 * torch.randn(3, 4, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]])
    adv = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64)
    a, _ = grpo_loss(logp, old, None, adv, mask)
    b, _ = grpo_loss(logp, old, None, adv[:, None].expand(3, 4).clone(), mask)
    assert a.item() == pytest.approx(b.item(), abs=1e-15)
    with pytest.raises(ValueError, match="adv"):
        grpo_loss(logp, old, None, adv[:2], mask)


def test_dual_clip_and_dr_grpo_hand_values():
    # one token, ratio exp(ln 4) = 4, A = -1, eps 0.2: min(4 * -1, 1.2 * -1) = -4 (unbounded branch);
    # dual-clip c = 3: max(-4, 3 * -1) = -3 -> loss 3, and no gradient (the constant branch).
    logp = torch.tensor([[math.log(4.0) - 1.0]], dtype=torch.float64, requires_grad=True)
    old = torch.tensor([[-1.0]], dtype=torch.float64)
    adv = torch.tensor([-1.0], dtype=torch.float64)
    loss, stats = grpo_loss(logp, old, None, adv, torch.ones(1, 1), dual_clip=3.0)
    assert loss.item() == pytest.approx(3.0, abs=1e-12)
    assert stats.clip_fraction == 1.0  # exact: a count over itself
    loss.backward()
    assert logp.grad.item() == 0.0  # exact: the dual-clip branch is a constant: its gradient is 0
    plain, _ = grpo_loss(logp, old, None, adv, torch.ones(1, 1))
    assert plain.item() == pytest.approx(4.0, abs=1e-12)
    # Dr. GRPO: rows of 1 and 2 tokens, ratio 1, A = [2, -1]: token sum 2 - 1 - 1 = 0 ... use A = [2, 1]:
    # sum = 2 + 1 + 1 = 4; / (B = 2 * N = 8) = 0.25 -> loss -0.25 (seq_mean_token_mean: (2 + 1) / 2 = 1.5)
    lp = torch.tensor([[-1.0, 0.0], [-1.0, -1.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    a = torch.tensor([2.0, 1.0], dtype=torch.float64)
    dr, _ = grpo_loss(lp, lp, None, a, mask, loss_agg="seq_mean_token_sum_norm", norm_tokens=8)
    assert dr.item() == pytest.approx(-0.25, abs=1e-12)
    with pytest.raises(ValueError, match="norm_tokens"):
        grpo_loss(lp, lp, None, a, mask, loss_agg="seq_mean_token_sum_norm")

"""``LoraProduct``: a LoRA layer as one product in the base's precision equals peft's layer (float32:
up to summation order; bfloat16: within bfloat16 rounding), and every case it does not cover runs
peft's own forward."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from peft import LoraConfig, get_peft_model

from teamplay.agents.lora_product import _plain_adapter, fuse_lora_layers, unfuse_lora_layers
from teamplay.agents.team_model import TeamModel
from tests.tiny import tiny_model_and_tokenizer

#: bfloat16 keeps 8 bits of mantissa: one rounding moves a value by at most 2**-9 of its size
BF16_ROUNDING = 2.0**-9


class Block(torch.nn.Module):
    """Two linear layers, the second with a bias: the layers peft adapts."""

    def __init__(self, dims: tuple[int, int, int], dtype: torch.dtype) -> None:
        super().__init__()
        self.up = torch.nn.Linear(dims[0], dims[1], bias=False, dtype=dtype)
        self.down = torch.nn.Linear(dims[1], dims[2], bias=True, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


def lora_block(dtype: torch.dtype, seed: int = 0, dims=(24, 40, 16), r: int = 4, **config):
    """``Block`` under one peft LoRA adapter whose A and B are both random (B starts at zero in peft,
    which would hide B's half of the product); adapters in float32 as peft keeps them."""
    torch.manual_seed(seed)
    block = Block(dims, dtype)
    model = get_peft_model(block, LoraConfig(r=r, lora_alpha=2 * r, target_modules=["up", "down"], **config))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.copy_(0.2 * torch.randn(p.shape))
    return model


def run(model, x: torch.Tensor, grad: torch.Tensor):
    """Output and the gradients of the input and of every LoRA weight, for upstream gradient ``grad``."""
    x = x.clone().requires_grad_(True)
    for p in model.parameters():
        p.grad = None
    out = model(x)
    out.backward(grad)
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return out.detach(), x.grad.clone(), grads


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), rows=st.integers(1, 9), r=st.sampled_from([1, 4, 8]))
def test_float32_equals_peft_up_to_summation_order(seed, rows, r):
    model = lora_block(torch.float32, seed, r=r)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, 3, 24, generator=gen)
    grad = torch.randn(rows, 3, 16, generator=gen)
    peft_out, peft_dx, peft_grads = run(model, x, grad)
    assert fuse_lora_layers(model) == 2
    out, dx, grads = run(model, x, grad)
    # the same float32 products in another order: a few ulps of the values' size
    assert torch.allclose(out, peft_out, rtol=1e-5, atol=1e-5)
    assert torch.allclose(dx, peft_dx, rtol=1e-5, atol=1e-5)
    assert grads.keys() == peft_grads.keys() and len(grads) == 4  # A and B of both layers
    for name, g in grads.items():
        assert g.dtype == torch.float32
        assert torch.allclose(g, peft_grads[name], rtol=1e-5, atol=1e-5), name


def test_bfloat16_differs_from_peft_by_bfloat16_rounding_only():
    """peft adds a float32 LoRA term to the bfloat16 base product and rounds once; the fused layer
    rounds A, the scaled B, the rank-r product and the LoRA term to bfloat16 first. Per element, each
    result is one rounding of the sum (2**-9 of |y|), and the standard bound of a product computed
    from rounded factors is in the product of absolute values: 4 roundings of
    s (|x| |A|^T) |B|^T. So |fused - peft| <= 2 * 2**-9 |y| + 4 * 2**-9 s (|x| |A|^T) |B|^T."""
    model = lora_block(torch.bfloat16, seed=3)
    x = torch.randn(64, 24).to(torch.bfloat16)
    peft_out = model(x).float()
    with torch.no_grad():
        layer = model.base_model.model.up
        lora = (x.float().abs() @ layer.lora_A["default"].weight.abs().t() @ layer.lora_B["default"].weight.abs().t()
                * layer.scaling["default"])  # [64, 40]: the first layer's LoRA term in absolute values
    fuse_lora_layers(model)
    up_fused = layer(x).float()
    unfuse_lora_layers(model)
    up_peft = layer(x).float()
    bound = 2 * BF16_ROUNDING * up_peft.abs() + 4 * BF16_ROUNDING * lora + 1e-6
    assert ((up_fused - up_peft).abs() <= bound).all()
    # exact: asserts a difference: fused and peft round these 2560 bfloat16 values differently
    assert not torch.equal(up_fused, up_peft)
    fuse_lora_layers(model)
    out = model(x).float()
    # two layers deep the per-element bound compounds; the whole output stays within a percent
    assert (out - peft_out).norm() <= 1e-2 * peft_out.norm()


def test_bfloat16_gradients_match_a_float64_reference():
    """The fused backward's adapter gradients, from bfloat16 products, against the same formulas in
    float64 on the same bfloat16 inputs: within a few bfloat16 roundings of their size."""
    model = lora_block(torch.bfloat16, seed=5)
    fuse_lora_layers(model)
    layer = model.base_model.model.up
    x = torch.randn(32, 24).to(torch.bfloat16)
    g = torch.randn(32, 40).to(torch.bfloat16)
    out = layer(x)
    out.backward(g)
    a = layer.lora_A["default"].weight.double()
    b = layer.lora_B["default"].weight.double()
    s = layer.scaling["default"]
    xd, gd = x.double(), g.double()
    want_a = s * (gd @ b).t() @ xd  # [r, in]
    want_b = s * gd.t() @ (xd @ a.t())  # [out, r]
    for got, want in ((layer.lora_A["default"].weight.grad, want_a), (layer.lora_B["default"].weight.grad, want_b)):
        assert got.dtype == torch.float32
        # the weights are rounded to bfloat16 and the rank-r intermediate once more: 8 roundings of
        # the result's scale bound it with room for the products' accumulation order
        assert (got.double() - want).abs().max() <= 8 * BF16_ROUNDING * want.abs().max()


def test_a_frozen_adapter_gets_no_gradient_and_the_input_still_does():
    model = lora_block(torch.float32, seed=1)
    fuse_lora_layers(model)
    for p in model.parameters():
        p.requires_grad_(False)
    x = torch.randn(5, 24, requires_grad=True)
    model(x).sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0
    assert all(p.grad is None for p in model.parameters())


@pytest.mark.parametrize("case", ["disabled", "merged", "dropout", "dora", "two adapters"])
def test_every_other_case_runs_peft_forward(case):
    config = {"lora_dropout": 0.1} if case == "dropout" else {"use_dora": True} if case == "dora" else {}
    model = lora_block(torch.float32, seed=2, **config)
    if case == "two adapters":
        model.add_adapter("other", LoraConfig(r=4, lora_alpha=8, target_modules=["up", "down"]))
        model.base_model.set_adapter(["default", "other"])
    model.eval()
    x = torch.randn(4, 24)
    layer = model.base_model.model.up
    fuse_lora_layers(model)
    if case == "disabled":
        with model.disable_adapter():
            assert _plain_adapter(layer, x) is None
            assert torch.equal(layer(x), layer.base_layer(x))  # exact: the fused layer calls the base layer itself
        return
    if case == "merged":
        model.merge_adapter()
    assert _plain_adapter(layer, x) is None
    assert torch.equal(layer(x), type(layer).forward(layer, x))  # exact: the fused layer calls peft's forward itself


def test_a_team_model_scores_and_trains_the_same_fused_or_not():
    """The whole path the update takes: completion log-probs and their adapter gradients with the
    fused layers equal peft's in float32, with shared prompts; ``fused=False`` installs nothing."""
    model, tokenizer = tiny_model_and_tokenizer(seed=0, hidden=32)
    team = TeamModel(model, tokenizer, ("proposer", "reviewer"), r=4, alpha=8)
    plain_model, _ = tiny_model_and_tokenizer(seed=0, hidden=32)
    plain = TeamModel(plain_model, tokenizer, ("proposer", "reviewer"), r=4, alpha=8, fused=False)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for (name, p), (name2, q) in zip(team.model.named_parameters(), plain.model.named_parameters(), strict=True):
            assert name == name2
            if "lora_" in name:
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
                q.copy_(p)
    assert all(not hasattr(m, "_teamplay_lora_product") for m in plain.model.modules())
    prompts = [[5, 6, 7, 8], [5, 6, 7, 9, 10], [5, 6, 7, 8]]
    completions = [[11, 12, 13], [14], [15, 16]]
    results = []
    for tm in (team, plain):
        logp, mask = tm.completion_logprobs(prompts, completions, adapter="reviewer", temperature=0.7,
                                            share_prompts=True)
        (logp * mask).sum().backward()
        grads = [p.grad.clone() for p in tm.adapter_parameters("reviewer")]
        results.append((logp.detach(), grads))
    (lp_fused, g_fused), (lp_plain, g_plain) = results
    assert torch.allclose(lp_fused, lp_plain, atol=1e-5)
    assert len(g_fused) == len(g_plain) > 0
    for a, b in zip(g_fused, g_plain, strict=True):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6)

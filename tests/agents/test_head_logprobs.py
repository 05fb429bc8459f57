"""``head_logprobs``: the chosen tokens' log-probs through a float32 head with one [N, V] buffer equal
the unfused ``log_softmax(head(h) / T)`` gather, in value and in the states' gradient."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from teamplay.agents.head_logprobs import HeadLogprobs, head_logprobs


def unfused(states: torch.Tensor, head: torch.nn.Module, targets: torch.Tensor, temperature: float) -> torch.Tensor:
    """What scoring computed before: the head's logits, divided, log-softmaxed, gathered."""
    logits = head(states.to(head.weight.dtype)).float()
    return torch.log_softmax(logits / temperature, dim=-1).gather(-1, targets[:, None]).squeeze(-1)


def frozen_head(dims: int, vocab: int, bias: bool, seed: int, dtype=torch.float32) -> torch.nn.Linear:
    torch.manual_seed(seed)
    head = torch.nn.Linear(dims, vocab, bias=bias, dtype=dtype)
    with torch.no_grad():
        head.weight.mul_(8.0)  # peaked distributions, as a trained model's (log-probs near 0 and far below)
    return head.requires_grad_(False)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), rows=st.integers(1, 12), vocab=st.integers(2, 300),
       temperature=st.sampled_from([0.3, 0.7, 1.0, 1.5]), bias=st.booleans(),
       states_dtype=st.sampled_from([torch.float32, torch.bfloat16]))
def test_values_and_gradients_equal_the_unfused_operations(seed, rows, vocab, temperature, bias, states_dtype):
    head = frozen_head(16, vocab, bias, seed)
    gen = torch.Generator().manual_seed(seed)
    states = torch.randn(rows, 16, generator=gen).to(states_dtype)
    targets = torch.randint(0, vocab, (rows,), generator=gen)
    upstream = torch.randn(rows, generator=gen)
    results = []
    for fn in (head_logprobs, unfused):
        h = states.clone().requires_grad_(True)
        out = fn(h, head, targets, temperature)
        out.backward(upstream)
        results.append((out.detach(), h.grad))
    (got, got_grad), (want, want_grad) = results
    assert got.dtype == torch.float32 and got_grad.dtype == states_dtype
    # float32 arithmetic in another order (the temperature folded into the states): relative 1e-5 of
    # log-probs whose size reaches tens of nats here
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-4)
    # a gradient element is g_i * sum_v (onehot - softmax)_v W_vd / T: its terms are at most
    # 2 |g_i| max_v |W_vd| / T in size, and an element that cancels (a saturated softmax, whose
    # 1 - p is float32 rounding of p near 1) keeps float32 error of that size, not of its own: the
    # absolute part of each bound is 16 float32 ulps (2**-24 each) of the terms
    want_grad, got_grad = want_grad.float(), got_grad.float()
    terms = upstream.abs()[:, None] * 2 * head.weight.abs().amax(0)[None, :] / temperature  # [rows, 16]
    floor = 2.0**-20 * terms
    if states_dtype == torch.float32:
        assert ((got_grad - want_grad).abs() <= 1e-4 * want_grad.abs() + floor).all()
    else:  # both rounded to bfloat16 at the end: one bfloat16 ulp apart (at most 2**-7 of the value)
        assert ((got_grad - want_grad).abs() <= 2.0**-7 * want_grad.abs() + floor).all()


def test_the_log_probs_of_every_token_of_a_row_sum_to_one():
    head = frozen_head(8, 50, True, 0)
    states = torch.randn(3, 8)
    every = torch.stack([head_logprobs(states, head, torch.full((3,), v), 0.7) for v in range(50)], dim=1)
    assert torch.allclose(every.exp().sum(dim=1), torch.ones(3), atol=1e-5)
    assert (every <= 0).all()


def test_a_second_backward_is_refused_with_a_reason():
    head = frozen_head(8, 20, False, 1)
    h = torch.randn(4, 8, requires_grad=True)
    out = HeadLogprobs.apply(h, head.weight, None, torch.tensor([1, 2, 3, 4]), 1.0).sum()
    out.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="backward ran twice"):
        out.backward()


@pytest.mark.parametrize("case", ["bfloat16 head", "trainable head", "wrapped head"])
def test_other_heads_run_their_own_forward(case):
    head = frozen_head(8, 30, False, 2, dtype=torch.bfloat16 if case == "bfloat16 head" else torch.float32)
    if case == "trainable head":
        head.requires_grad_(True)
    module = torch.nn.Sequential(head) if case == "wrapped head" else head
    module.weight = head.weight  # the attribute the fused path reads, present on every variant
    states = torch.randn(5, 8).to(head.weight.dtype)  # a bfloat16 head sits on a bfloat16 body
    targets = torch.tensor([0, 3, 7, 29, 11])
    calls = []
    module.register_forward_hook(lambda *_: calls.append(1))
    out = head_logprobs(states, module, targets, 0.7)
    assert calls == [1]  # the head's own forward ran (its hooks with it)
    # exact: the fallback runs these same operations on the same input
    assert torch.equal(out, unfused(states, module, targets, 0.7))

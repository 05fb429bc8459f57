"""The update scores each adapter's share with its prompts shared (a group's repeated prompt and a
role's common system prompt run once, gradients through the shared key/value cache): its loss,
gradients and adapters equal the plain path's, one forward pass per row."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from teamplay.agents.team_model import TeamModel
from teamplay.config import TrainConfig, build_config
from teamplay.training.learn.samples import PolicySample
from teamplay.training.learn.update import PolicyUpdater
from tests.tiny import tiny_model_and_tokenizer

#: the prompts of a minibatch as a team writes them: every prompt starts with its role's system
#: prompt (HEAD), a group's episodes repeat their question, and prompts differ in length
HEAD = [5, 6, 7, 8, 9, 10, 11]
QUESTIONS = [[20, 21, 22], [23, 24], [25, 26, 27, 28, 29], [30]]

#: the shared and the plain paths run the same float32 products in another order (the prefix's and
#: the prompts' keys and values computed once, then copied): the tiny model's log-probs agree to
#: about 1e-6 and its gradients, of order 1e-2 to 1, to about 1e-6 too (measured worst 4.8e-7 on
#: the logits' path). 2e-5 leaves room for another CPU's kernels; a wrong row in the cache (another
#: row's prompt) moves a gradient entry by more than 1e-2.
TOL = 2e-5


def team() -> TeamModel:
    model, tokenizer = tiny_model_and_tokenizer(seed=0)
    tm = TeamModel(model, tokenizer, ("proposer", "reviewer"), r=4, alpha=8)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():  # non-zero LoRA weights, so the adapters' gradients all differ from 0
        for name in tm.adapter_names:
            for p in tm.adapter_parameters(name):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    return tm


def rows(seed: int, n: int) -> tuple[list[list[int]], list[list[int]]]:
    """``n`` prompts (HEAD + a question, each question repeated by a group) and completions of 1-6 tokens."""
    rng = np.random.default_rng(seed)
    prompts = [HEAD + QUESTIONS[int(rng.integers(len(QUESTIONS)))] for _ in range(n)]
    completions = [[int(t) for t in rng.integers(40, 250, size=int(rng.integers(1, 7)))] for _ in range(n)]
    return prompts, completions


def gradients(tm: TeamModel, prompts, completions, share: bool) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Log-probs [B, C] under ``proposer`` and the gradient of a weighted sum of them w.r.t. its LoRA weights."""
    params = tm.adapter_parameters("proposer")
    for p in params:
        p.grad = None
    logp, mask = tm.completion_logprobs(prompts, completions, adapter="proposer", temperature=0.7,
                                        share_prompts=share)
    weights = torch.linspace(-1.0, 1.0, logp.numel()).reshape(logp.shape)
    (logp * weights * mask).sum().backward()
    return logp.detach(), [p.grad.clone() for p in params]


def test_gradients_through_shared_prompts_equal_the_plain_paths():
    tm = team()
    prompts, completions = rows(seed=0, n=8)
    assert len({tuple(p) for p in prompts}) < len(prompts)  # repeated prompts, and a common prefix
    plain, plain_grads = gradients(tm, prompts, completions, share=False)
    shared, shared_grads = gradients(tm, prompts, completions, share=True)
    torch.testing.assert_close(shared, plain, atol=TOL, rtol=0)
    assert sum(float(g.abs().sum()) for g in plain_grads) > 1.0  # the gradient is not trivially 0
    for a, b in zip(shared_grads, plain_grads, strict=True):
        torch.testing.assert_close(a, b, atol=TOL, rtol=TOL)


def config(minibatch: int, epochs: int = 1) -> TrainConfig:
    return build_config(TrainConfig, {
        "protocol": {"name": "proposer_reviewer", "options": {"rounds": 2}},
        "team": {"roles": [{"name": "proposer"}, {"name": "reviewer"}]},
        "sampling": {"max_new_tokens": 6, "temperature": 0.7},
        "optim": {"lr": 0.1, "minibatch_size": minibatch, "epochs": epochs}})


def samples(tm: TeamModel, n: int) -> list[PolicySample]:
    """``n`` messages alternating between the adapters, scored under the current adapters (their
    behaviour log-probs), with advantages of both signs."""
    prompts, completions = rows(seed=3, n=n)
    rng = np.random.default_rng(4)
    out = []
    for i, (p, c) in enumerate(zip(prompts, completions, strict=True)):
        adapter = ("proposer", "reviewer")[i % 2]
        with torch.no_grad():
            logp, _ = tm.completion_logprobs([p], [c], adapter=adapter, temperature=0.7)
        out.append(PolicySample(adapter=adapter, role=adapter, prompt_ids=tuple(p), completion_ids=tuple(c),
                                old_logprobs=tuple(float(x) for x in logp[0, :len(c)]),
                                advantage=float(rng.normal()), group_id=f"g{i // 4}"))
    return out


@pytest.mark.parametrize("minibatch,epochs", [(16, 1), (4, 2)])
def test_an_update_with_shared_prompts_equals_the_plain_update(minibatch, epochs):
    cfg = config(minibatch, epochs)
    results = {}
    for share in (False, True):
        tm = team()
        params = {a: tm.adapter_parameters(a) for a in tm.adapter_names}
        # plain SGD: AdamW's first steps move every weight by about lr whatever its gradient's size,
        # so a gradient entry within rounding of 0 could move by 2 lr between two equal updates. At
        # lr 0.1 the weights move by 1e-2 and the two paths stay within 2e-6 after 8 steps; at lr 0.5
        # the tiny model amplifies the first steps' rounding to 3e-4 (measured)
        optimizer = torch.optim.SGD([p for a in tm.adapter_names for p in params[a]], lr=cfg.optim.lr)
        updater = PolicyUpdater(cfg, tm, params, optimizer)
        updater.share_prompts = share
        start = [p.detach().clone() for a in tm.adapter_names for p in params[a]]
        metrics = updater.update(samples(tm, 16), step=0)
        after = [p.detach().clone() for a in tm.adapter_names for p in params[a]]
        results[share] = (metrics, start, after)
    (plain, start, plain_after), (shared, _, shared_after) = results[False], results[True]
    assert shared["optimizer_steps"] == plain["optimizer_steps"] == (16 // minibatch) * epochs
    for key in ("loss", "ratio_mean", "grad_norm", "entropy"):
        assert shared[key] == pytest.approx(plain[key], rel=TOL, abs=TOL), key
    assert max(float((b - a).abs().max()) for a, b in zip(start, plain_after, strict=True)) > 5e-3  # it learned
    for a, b in zip(shared_after, plain_after, strict=True):
        torch.testing.assert_close(a, b, atol=TOL, rtol=TOL)

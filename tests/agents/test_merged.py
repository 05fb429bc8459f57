"""Merged-adapter generation: the plain copy computes each adapter's policy, shares what it can with
the team model, follows every update and merges an unchanged adapter once."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig

from teamplay.agents.backends.hf import HFBackend
from teamplay.agents.merged import MergedAdapterModel, unsupported
from teamplay.agents.team_model import TeamModel
from teamplay.records import SamplingParams
from tests.agents.test_hf_backend import ADAPTERS, make_backend, perturb, request
from tests.tiny import tiny_model_and_tokenizer


def team(seed: int = 0) -> TeamModel:
    model, tokenizer = tiny_model_and_tokenizer(seed=seed)
    tm = TeamModel(model, tokenizer, ADAPTERS)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in tm.adapter_parameters("proposer"):
            p.copy_(0.3 * torch.randn(p.shape, generator=gen))
    return tm


def logits(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids).logits  # [1, L, V]


IDS = torch.tensor([[5, 17, 40, 99, 3, 250, 12]])


@pytest.mark.parametrize("adapter", ["proposer", "reviewer", None])
def test_the_merged_model_computes_each_adapters_policy(adapter):
    tm = team()
    merged = MergedAdapterModel(tm)
    with torch.no_grad(), tm.using(adapter):
        want = logits(tm.model, IDS)
    got = logits(merged.use(adapter), IDS)
    # float32: W x + s B (A x) against (W + s B A) x differ by summation order only (about 1e-7
    # relative per product; the logits of this model are O(1))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    if adapter == "proposer":  # the perturbed adapter really changes the logits the test compares
        with torch.no_grad(), tm.disabled_adapters():
            assert (logits(tm.model, IDS) - want).abs().max() > 1e-2


def test_the_copy_shares_every_tensor_but_the_adapted_weights():
    tm = team()
    merged = MergedAdapterModel(tm)
    base = {p.data_ptr() for p in tm.base_model.parameters()}
    own = [n for n, p in merged.model.named_parameters() if p.data_ptr() not in base]
    adapted = [n for n, m in tm.base_model.named_modules() if hasattr(m, "lora_A")]
    assert own and sorted(own) == sorted(f"{n}.weight" for n in adapted)
    assert not any("lora" in n for n, _ in merged.model.named_parameters())
    assert all(not p.requires_grad for p in merged.model.parameters())
    # merging never writes into the team model
    before = {n: p.clone() for n, p in tm.model.named_parameters()}
    merged.use("proposer")
    merged.use("reviewer")
    # exact: untouched weights keep their bits (clone vs original)
    assert all(torch.equal(before[n], p) for n, p in tm.model.named_parameters())


def test_an_update_is_followed_and_an_unchanged_adapter_is_merged_once(monkeypatch):
    tm = team()
    merged = MergedAdapterModel(tm)
    merges = []
    merge = merged._merge
    monkeypatch.setattr(merged, "_merge", lambda adapter: (merges.append(adapter), merge(adapter)))
    merged.use("proposer")
    merged.use("proposer")
    assert merges == ["proposer"]
    # an optimizer step changes the adapter in place: the next use merges again
    params = tm.adapter_parameters("proposer")
    opt = torch.optim.Adam(params, lr=1e-2)
    tm.set_adapter("proposer")
    loss = tm.model(input_ids=IDS).logits.square().mean()
    loss.backward()
    opt.step()
    got = logits(merged.use("proposer"), IDS)
    assert merges == ["proposer", "proposer"]
    with torch.no_grad():
        torch.testing.assert_close(got, logits(tm.model, IDS), atol=1e-5, rtol=0)
    # switching adapters merges the other one; coming back merges again (one copy is kept)
    merged.use("reviewer")
    merged.use("proposer")
    assert merges == ["proposer", "proposer", "reviewer", "proposer"]


def test_loaded_adapters_are_followed(tmp_path):
    source, target = team(seed=0), team(seed=0)
    perturb_gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for p in source.adapter_parameters("reviewer"):
            p.copy_(0.3 * torch.randn(p.shape, generator=perturb_gen))
    merged = MergedAdapterModel(target)
    stale = logits(merged.use("reviewer"), IDS)
    target.load_adapters(source.save_adapters(tmp_path / "adapters"))
    fresh = logits(merged.use("reviewer"), IDS)
    with torch.no_grad(), source.using("reviewer"):
        torch.testing.assert_close(fresh, logits(source.model, IDS), atol=1e-5, rtol=0)
    assert (fresh - stale).abs().max() > 1e-2


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_merged_generation_equals_generation_through_peft(temperature):
    fast, slow = make_backend(), make_backend(merge_adapters=False)
    assert fast.merged_generation is None and slow.merged_generation == "merge_adapters is off"
    for backend in (fast, slow):
        perturb(backend, "proposer", 1)
    requests = [request(i, adapter) for i in range(4) for adapter in ("proposer", "reviewer", None)]
    params = SamplingParams(max_new_tokens=10, temperature=temperature, seed=4)
    for a, b in zip(fast.generate(requests, params), slow.generate(requests, params), strict=True):
        assert a.completion_ids == b.completion_ids and a.adapter == b.adapter
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)


def test_a_model_that_cannot_merge_generates_through_peft_and_says_why():
    model, tokenizer = tiny_model_and_tokenizer(seed=0)
    tm = TeamModel(model, tokenizer, ("proposer",))
    tm.model.add_adapter("dora", LoraConfig(r=4, use_dora=True, target_modules="all-linear"))
    assert "variant" in unsupported(tm)
    backend = HFBackend(tm)
    assert "variant" in backend.merged_generation
    out = backend.generate([request(0)], SamplingParams(max_new_tokens=4))
    assert len(out[0].completion_ids) > 0
    with pytest.raises(ValueError, match="cannot merge"):
        MergedAdapterModel(tm)
    bare = TeamModel(*tiny_model_and_tokenizer(seed=0), ())
    assert unsupported(bare) == "the team model has no adapters"

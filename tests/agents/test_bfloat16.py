"""bfloat16 base weights: ``model.dtype: auto`` picks them only where the device has native units, the
LoRA adapters and the output head stay float32, the behaviour log-probs match the trainer's on
average, and batching prompts of one length changes no greedy token."""

from __future__ import annotations

import pytest
import torch

from teamplay.agents.backends.hf import HFBackend
from teamplay.agents.models import float32_head, resolve_dtype
from teamplay.agents.team_model import TeamModel
from teamplay.records import ChatMessage, SamplingParams, TurnRequest
from tests.agents.test_cpu_dtype import cpu
from tests.tiny import tiny_model_and_tokenizer

ADAPTERS = ("proposer", "reviewer")


def bf16_backend(head: bool = True, b_scale: float = 0.1, **kwargs) -> HFBackend:
    """The tiny model in bfloat16 (its output head in float32 when ``head``, as ``dtype: auto``
    builds it), with a perturbed proposer adapter (A and B drawn with sd 0.1 and ``b_scale``; at
    0.1 the update B A is 4x the weight it adapts in norm, at 0.01 0.4x). Its head is scaled up so
    that its next-token distributions are about as peaked as the embedded model's (mean log-prob
    about -2.3, not the near-uniform -5.5 of the random model), where bfloat16 rounding shows in
    the log-probs."""
    model, tokenizer = tiny_model_and_tokenizer(seed=0, hidden=64)
    with torch.no_grad():
        model.lm_head.weight.mul_(20.0)
    model = model.to(torch.bfloat16)
    if head:
        float32_head(model)
    backend = HFBackend(TeamModel(model, tokenizer, ADAPTERS), **kwargs)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():  # B starts at zero: make the adapter change the outputs
        for name, p in backend.team_model.model.named_parameters():
            if ".proposer." in name:
                p.copy_((b_scale if "lora_B" in name else 0.1) * torch.randn(p.shape, generator=gen))
    return backend


def request(i: int) -> TurnRequest:
    return TurnRequest(agent="proposer_0", role="proposer", stage="propose", round=0, adapter="proposer",
                       chat=(ChatMessage("system", "You solve problems."),
                             ChatMessage("user", f"Problem {i}: " + "how many apples? " * i)))


@pytest.mark.parametrize(("avx512_bf16", "amx"), [(True, False), (False, True)])
def test_auto_is_bfloat16_on_a_cpu_with_native_units(monkeypatch, avx512_bf16, amx):
    cpu(monkeypatch, True, avx512_bf16, amx)
    assert resolve_dtype("auto") == resolve_dtype("auto", "cpu") == "bfloat16"


def test_auto_is_float32_where_bfloat16_would_be_slow_or_unknown(monkeypatch):
    cpu(monkeypatch, True, False, False)  # x86 without AVX512-BF16 or AMX
    assert resolve_dtype("auto") == "float32"
    cpu(monkeypatch, False, False, False)  # a CPU PyTorch cannot describe
    assert resolve_dtype("auto", torch.device("cpu")) == "float32"


def test_auto_on_a_gpu_follows_its_bfloat16_support(monkeypatch):
    for supported, expected in ((True, "bfloat16"), (False, "float32")):
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda s=supported: s)
        assert resolve_dtype("auto", "cuda:0") == expected


def test_an_explicit_dtype_is_kept_whatever_the_cpu(monkeypatch):
    cpu(monkeypatch, True, True, True)
    assert [resolve_dtype(d) for d in ("float32", "bfloat16", "float16")] == ["float32", "bfloat16", "float16"]


def test_a_run_built_with_auto_loads_bfloat16_base_and_float32_adapters(monkeypatch, tmp_path):
    from teamplay.agents.roles import Role, Team
    from teamplay.config import ModelConfig
    from teamplay.training.wiring.model import build_team_model
    from tests.tiny import save_tiny

    folder = str(save_tiny(tmp_path / "tiny"))
    team = Team(roles=(Role(name="proposer"),))
    cpu(monkeypatch, True, True, False)
    auto = build_team_model(ModelConfig(name=folder, dtype="auto"), team)
    assert auto.base_model.dtype == torch.bfloat16
    assert auto.base_model.get_input_embeddings().weight.dtype == torch.bfloat16
    assert auto.base_model.get_output_embeddings().weight.dtype == torch.float32  # float32 logits
    assert {p.dtype for p in auto.trainable_parameters()} == {torch.float32}
    explicit = build_team_model(ModelConfig(name=folder, dtype="bfloat16"), team)  # exactly as asked
    assert explicit.base_model.get_output_embeddings().weight.dtype == torch.bfloat16
    default = build_team_model(ModelConfig(name=folder), team)  # the default stays float32
    assert {p.dtype for p in default.base_model.parameters()} == {torch.float32}
    cpu(monkeypatch, True, False, False)
    assert build_team_model(ModelConfig(name=folder, dtype="auto"), team).base_model.dtype == torch.float32


def ratios(backend: HFBackend, temperature: float) -> torch.Tensor:
    """Per-token trainer / behaviour probability of 6 completions of 12 tokens: [tokens]."""
    gens = backend.generate([request(i) for i in range(6)],
                            SamplingParams(max_new_tokens=12, temperature=temperature, seed=3))
    with torch.no_grad():
        logp, mask = backend.team_model.completion_logprobs(
            [g.prompt_ids for g in gens], [g.completion_ids for g in gens], adapter="proposer",
            temperature=temperature or 1.0)  # [B, C]
    behaviour = torch.zeros_like(logp)
    for b, g in enumerate(gens):
        behaviour[b, : len(g.logprobs)] = torch.tensor(g.logprobs)
    return torch.exp(logp - behaviour)[mask.bool()]


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_bfloat16_behaviour_over_trainer_ratio_is_1_within_1e_2_on_average(temperature):
    ratio = ratios(bf16_backend(merge_adapters=False), temperature)
    assert ratio.numel() == 72
    # The two paths (cached token-by-token decoding vs one forward pass over prompt + completion)
    # round bfloat16 activations (8-bit mantissa) in different orders, so single tokens differ by a
    # few percent (measured here: up to 3.2% on one CPU, 1e-6 on another; 23% on the embedded
    # model, BENCHMARKS.md). The bound is on the mean, what biases the update: 1e-2, the issue's
    # bound; measured 1e-7 to 5e-3.
    assert abs(float(ratio.mean()) - 1) < 1e-2
    assert float((ratio - 1).abs().max()) < 0.2  # the demo's clip range: no token clipped at epoch 1


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_merged_bfloat16_behaviour_over_trainer_ratio_is_1_within_1e_2_on_average(temperature):
    # Merged generation rounds W + B A to bfloat16 once, the trainer rounds W and adds B A x in
    # float32: the per-weight difference is up to half a bfloat16 step of |W + B A|, so it grows
    # with the update's size. With the update at 0.4x the weight's norm (far more than a LoRA of
    # an RL run moves; at 4x the mean reached 1.5e-2) the mean ratio measured 1.4e-3 to 1.6e-3
    # from 1, single tokens up to 3.7%; the bounds are the unmerged test's.
    ratio = ratios(bf16_backend(b_scale=0.01), temperature)
    assert ratio.numel() == 72
    assert abs(float(ratio.mean()) - 1) < 1e-2
    assert float((ratio - 1).abs().max()) < 0.2


def test_the_float32_head_computes_the_logits_in_float32():
    # A bfloat16 head rounds the logits themselves to 8 bits of mantissa (on the embedded model the
    # behaviour/trainer ratio's mean |r - 1| fell from 0.034 to 0.019 with the float32 head,
    # BENCHMARKS.md §2b). On this tiny model, with the tokens held fixed, the body's own bfloat16
    # rounding dominates both heads' deviation from a float32 copy (mean |delta log p| 0.019 against
    # 0.020), so what is asserted is the mechanism: the float32 head's logits are the float32 product
    # of the body's bfloat16 hidden state, and not on bfloat16's grid as the bfloat16 head's are.
    ids = torch.tensor([list(range(3, 40))])  # [1, T]
    logits = {}
    for head in (True, False):
        model = bf16_backend(head=head).team_model.base_model
        with torch.no_grad():
            hidden = model.model(input_ids=ids).last_hidden_state  # [1, T, H], bfloat16
            logits[head] = model(input_ids=ids).logits  # [1, T, V]
            weight = model.get_output_embeddings().weight.float()  # [V, H]
        assert hidden.dtype == torch.bfloat16
        if head:
            # float32 summation order may differ from the reference matmul: ~1e-6 of logits up to ~30
            torch.testing.assert_close(logits[head], hidden.float() @ weight.T, atol=1e-4, rtol=1e-5)
    assert logits[True].dtype == torch.float32 and logits[False].dtype == torch.bfloat16
    on_grid = logits[True] == logits[True].to(torch.bfloat16).float()
    assert on_grid.float().mean() < 0.5  # float32 logits: most are between bfloat16's grid points
    # the bfloat16 head's logits are those same products, rounded: within bfloat16's relative
    # resolution (2^-8) of the float32 ones, plus the rounding of the hidden state's sum
    assert torch.all((logits[False].float() - logits[True]).abs() <= 2 ** -7 * logits[True].abs() + 0.05)


def test_bfloat16_batched_greedy_equals_one_at_a_time_for_prompts_of_one_length():
    # Rows of one length batch exactly: a row's products do not depend on the other rows. Left
    # padding does change a row's rounding in bfloat16 (attention over a longer, masked row): on
    # this model 1 of 8 greedy completions of 8 different lengths then diverged after a few
    # tokens, so the padded case is exact in float32 only (test_hf_backend), not asserted here.
    backend = bf16_backend()
    greedy = SamplingParams(max_new_tokens=10)
    requests = [TurnRequest(agent="proposer_0", role="proposer", stage="propose", round=0, adapter="proposer",
                            chat=(ChatMessage("user", f"Problem {w}: how many?"),))
                for w in ("ab", "cd", "xy", "qq", "zz", "mn")]
    batched = backend.generate(requests, greedy)
    assert len({g.prompt_ids for g in batched}) == 6 and len({len(g.prompt_ids) for g in batched}) == 1
    for req, out in zip(requests, batched, strict=True):
        assert out.completion_ids == backend.generate([req], greedy)[0].completion_ids

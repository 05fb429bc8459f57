"""TeamModel: adapters per role, trainability, log-probs with padding, reference policy, save/load."""

import pytest
import torch
from peft import PeftModel

from teamplay.agents.roles import Role, Team
from teamplay.agents.team_model import TeamModel
from teamplay.errors import ConfigError, ModelLoadError
from tests.tiny import tiny_model_and_tokenizer

PROMPTS = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14, 15, 16, 17, 18, 19]]
COMPLETIONS = [[20, 21, 22], [23], [24, 25, 26, 27, 28]]


def team(adapters=("proposer", "reviewer"), frozen=(), seed=0, **lora):
    model, tokenizer = tiny_model_and_tokenizer(seed=seed)
    return TeamModel(model, tokenizer, adapters, frozen=frozen, **lora)


def perturb(tm: TeamModel, adapter: str, seed: int) -> None:
    """Give ``adapter`` non-zero LoRA weights (lora_B starts at zero, i.e. the base model)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in tm.adapter_parameters(adapter):
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5)


def direct_logprobs(tm: TeamModel, prompt, completion, adapter):
    """Unpadded single-row reference: log_softmax of a plain forward pass."""
    ids = torch.tensor([prompt + completion])
    with torch.no_grad(), tm.using(adapter):
        logits = tm.model(input_ids=ids).logits[0]  # [P+C, V]
    logp = torch.log_softmax(logits.float(), -1)
    return torch.stack([logp[len(prompt) + j - 1, t] for j, t in enumerate(completion)])


def test_fresh_adapters_equal_the_base_model_until_trained():
    tm = team()
    with torch.no_grad():
        base, _ = tm.completion_logprobs(PROMPTS, COMPLETIONS, adapter=None)
        prop, _ = tm.completion_logprobs(PROMPTS, COMPLETIONS, adapter="proposer")
    assert torch.equal(base, prop)  # exact: a fresh adapter's B is 0: the same base GEMM plus exact zeros


def test_logprobs_are_independent_of_padding_and_masked():
    tm = team()
    perturb(tm, "proposer", 1)
    with torch.no_grad():
        logp, mask = tm.completion_logprobs(PROMPTS, COMPLETIONS, adapter="proposer")
    assert logp.shape == mask.shape == (3, 5)
    assert mask.tolist() == [[1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1]]
    assert torch.all(logp[mask == 0] == 0)
    for b, (p, c) in enumerate(zip(PROMPTS, COMPLETIONS, strict=True)):
        expected = direct_logprobs(tm, p, c, "proposer")
        torch.testing.assert_close(logp[b, : len(c)], expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("adapter", [None, "proposer"])
def test_shared_prompts_give_the_plain_paths_values(adapter):
    # a group's samples repeat their prompt: each distinct prompt runs once and its cache continues
    # every completion (different lengths, one of a single token, one empty)
    tm = team()
    perturb(tm, "proposer", 1)
    prompts = [PROMPTS[0], PROMPTS[1], PROMPTS[0], PROMPTS[2], PROMPTS[1], PROMPTS[0]]
    completions = [[20, 21, 22], [23], [30, 31, 32, 33, 34, 35], [24, 25, 26, 27, 28], [40, 41], []]
    with torch.no_grad():
        plain, mask = tm.completion_logprobs(prompts, completions, adapter=adapter, temperature=0.7)
        shared, shared_mask = tm.completion_logprobs(prompts, completions, adapter=adapter, temperature=0.7,
                                                     share_prompts=True)
        dist_plain, targets, _ = tm.completion_logprobs(prompts, completions, adapter=adapter,
                                                        return_distributions=True)
        dist_shared, shared_targets, _ = tm.completion_logprobs(prompts, completions, adapter=adapter,
                                                                return_distributions=True, share_prompts=True)
    # exact: integer targets and boolean masks
    assert torch.equal(mask, shared_mask) and torch.equal(targets, shared_targets)
    torch.testing.assert_close(shared, plain, atol=1e-5, rtol=0)
    real = mask.bool()  # rows of padding hold values of no meaning
    torch.testing.assert_close(dist_shared[real], dist_plain[real], atol=1e-5, rtol=0)
    at_t1 = dist_shared.gather(-1, shared_targets[..., None]).squeeze(-1)  # [B, C], temperature 1
    for b, (p, c) in enumerate(zip(prompts, completions, strict=True)):
        if c:  # and both equal an unpadded forward pass of the row alone
            torch.testing.assert_close(at_t1[b, :len(c)], direct_logprobs(tm, p, c, adapter), atol=1e-5, rtol=0)


@pytest.mark.parametrize("adapter", [None, "proposer"])
def test_a_common_prompt_prefix_runs_once_and_gives_the_plain_paths_values(adapter):
    # a team's prompts share their system prompt: the prefix runs once, each prompt continues with
    # its own remainder (different lengths; one prompt is the prefix plus one token; one is a prefix
    # of another, which caps the shared part so each keeps a token of its own); all prompts distinct
    head = [5, 6, 7, 8, 9, 10]
    prompts = [head + [11, 12, 13], head + [14], head + [11, 12, 13, 15, 16], head + [17, 18], head + [11, 12]]
    completions = [[20, 21, 22], [23, 24], [25], [26, 27, 28, 29], [30, 31]]
    tm = team()
    perturb(tm, "proposer", 3)
    with torch.no_grad():
        plain, _ = tm.completion_logprobs(prompts, completions, adapter=adapter)
        shared, _ = tm.completion_logprobs(prompts, completions, adapter=adapter, share_prompts=True)
        repeated, _ = tm.completion_logprobs(prompts + prompts[:2], completions + completions[:2], adapter=adapter,
                                             share_prompts=True)
    torch.testing.assert_close(shared, plain, atol=1e-5, rtol=0)
    torch.testing.assert_close(repeated[:5], plain, atol=1e-5, rtol=0)
    torch.testing.assert_close(repeated[5:], plain[:2], atol=1e-5, rtol=0)
    for b, (p, c) in enumerate(zip(prompts, completions, strict=True)):
        torch.testing.assert_close(shared[b, :len(c)], direct_logprobs(tm, p, c, adapter), atol=1e-5, rtol=0)


def testcommon_prefix_leaves_each_prompt_a_token_of_its_own():
    from teamplay.agents.team_model import common_prefix
    assert common_prefix([(1, 2, 3)]) == 0
    assert common_prefix([(1, 2, 3), (4, 2, 3)]) == 0
    assert common_prefix([(1, 2, 3, 4), (1, 2, 5)]) == 2
    assert common_prefix([(1, 2), (1, 2, 3)]) == 1
    assert common_prefix([(1,), (1, 2)]) == 0
    assert common_prefix([(1, 2, 3), (1, 2, 3)]) == 2


def test_reference_logprobs_share_prompts_and_match_the_base_model():
    tm = team()
    perturb(tm, "proposer", 2)
    prompts = [PROMPTS[2]] * 3 + [PROMPTS[1]]
    completions = [[24, 25], [26, 27, 28], [29], [23, 24]]
    ref, mask = tm.reference_logprobs(prompts, completions, "proposer")
    for b, (p, c) in enumerate(zip(prompts, completions, strict=True)):
        torch.testing.assert_close(ref[b, :len(c)], direct_logprobs(tm, p, c, None), atol=1e-5, rtol=0)


def test_temperature_divides_the_logits():
    tm = team()
    ids = torch.tensor([PROMPTS[0] + COMPLETIONS[0]])
    with torch.no_grad():
        logits = tm.model(input_ids=ids).logits[0]  # [8, V]
        logp, _ = tm.completion_logprobs(PROMPTS[:1], COMPLETIONS[:1], adapter="proposer", temperature=0.5)
    expected = torch.log_softmax(logits[4:7] / 0.5, -1).gather(-1, torch.tensor([[20], [21], [22]]))[:, 0]
    torch.testing.assert_close(logp[0], expected, atol=1e-5, rtol=0)


def test_empty_completions_and_bad_inputs():
    tm = team()
    logp, mask = tm.completion_logprobs([[5, 6], [7]], [[], [8, 9]], adapter=None)
    assert mask.tolist() == [[0, 0], [1, 1]] and logp[0].tolist() == [0, 0]
    logp, mask = tm.completion_logprobs([[5]], [[]], adapter=None)
    assert logp.shape == (1, 0)
    with pytest.raises(ValueError, match="at least one token"):
        tm.completion_logprobs([[]], [[5]], adapter=None)
    with pytest.raises(ValueError, match="temperature"):
        tm.completion_logprobs([[5]], [[6]], adapter=None, temperature=0)
    with pytest.raises(ConfigError, match="unknown adapter 'judge'"):
        tm.completion_logprobs([[5]], [[6]], adapter="judge")


def test_gradients_reach_only_the_scored_adapter():
    tm = team()
    perturb(tm, "proposer", 1)
    perturb(tm, "reviewer", 2)
    logp, mask = tm.completion_logprobs(PROMPTS, COMPLETIONS, adapter="reviewer")
    (logp * mask).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in tm.adapter_parameters("reviewer"))
    assert all(p.grad is None for p in tm.adapter_parameters("proposer"))
    assert all(p.grad is None for p in tm.base_model.parameters() if not p.requires_grad)


def test_trainability_survives_adapter_switches():
    tm = team(adapters=("proposer", "reviewer", "judge"), frozen=("judge",))
    for name in ("reviewer", "judge", "proposer"):
        tm.set_adapter(name)
        assert all(p.requires_grad for p in tm.adapter_parameters("proposer"))
        assert all(p.requires_grad for p in tm.adapter_parameters("reviewer"))
        assert not any(p.requires_grad for p in tm.adapter_parameters("judge"))
    trainable = {id(p) for p in tm.trainable_parameters()}
    assert trainable == {id(p) for n in ("proposer", "reviewer") for p in tm.adapter_parameters(n)}
    assert {id(p) for p in tm.model.parameters() if p.requires_grad} == trainable


def test_disabled_adapters_is_the_base_model():
    tm = team(seed=3)
    perturb(tm, "proposer", 1)
    reference, _ = tiny_model_and_tokenizer(seed=3)
    ids = torch.tensor([PROMPTS[2] + COMPLETIONS[2]])
    with torch.no_grad():
        with tm.disabled_adapters():
            disabled = tm.model(input_ids=ids).logits
        adapted = tm.model(input_ids=ids).logits
        plain = reference(input_ids=ids).logits
    torch.testing.assert_close(disabled, plain, atol=1e-6, rtol=0)
    assert (adapted - plain).abs().max() > 1e-3


def test_save_and_load_round_trip(tmp_path):
    tm = team(r=4, alpha=8)
    perturb(tm, "proposer", 1)
    perturb(tm, "reviewer", 2)
    folder = tm.save_adapters(tmp_path / "adapters")
    assert sorted(p.name for p in folder.iterdir()) == ["proposer", "reviewer", "team_adapters.json"]
    with torch.no_grad():
        expected = {a: tm.completion_logprobs(PROMPTS, COMPLETIONS, adapter=a)[0] for a in tm.adapter_names}

    fresh = team(r=4, alpha=8)
    params_before = [id(p) for p in fresh.adapter_parameters("proposer")]
    assert fresh.load_adapters(folder) == ("proposer", "reviewer")
    assert [id(p) for p in fresh.adapter_parameters("proposer")] == params_before  # loaded in place
    with torch.no_grad():
        for a in tm.adapter_names:
            # exact: the same forward on weights saved and loaded bit for bit, in this process
            torch.testing.assert_close(fresh.completion_logprobs(PROMPTS, COMPLETIONS, adapter=a)[0],
                                       expected[a], atol=0, rtol=0)

    # The standard PEFT loader reads each subfolder on its own.
    base, _ = tiny_model_and_tokenizer(seed=0)
    peft = PeftModel.from_pretrained(base, folder / "reviewer")
    ids = torch.tensor([PROMPTS[0] + COMPLETIONS[0]])
    tm.set_adapter("reviewer")
    with torch.no_grad():
        expected = tm.model(input_ids=ids).logits
        torch.testing.assert_close(peft(input_ids=ids).logits, expected, atol=1e-6, rtol=0)


def test_saving_again_replaces_the_folder_and_loading_adds_new_adapters(tmp_path):
    tm = team()
    tm.save_adapters(tmp_path / "a")
    perturb(tm, "proposer", 1)
    tm.save_adapters(tmp_path / "a")  # replaces the first set
    fresh = team(adapters=("proposer",))
    assert fresh.load_adapters(tmp_path / "a") == ("proposer", "reviewer")
    assert fresh.adapter_names == ("proposer", "reviewer")
    for a, b in zip(fresh.adapter_parameters("proposer"), tm.adapter_parameters("proposer"), strict=True):
        assert torch.equal(a, b)  # exact: loaded weights are the saved bits
    assert all(p.requires_grad for p in fresh.adapter_parameters("reviewer"))
    assert [p.name for p in tmp_path.iterdir()] == ["a"]  # no temp folders left behind


def test_load_errors(tmp_path):
    tm = team(r=4)
    tm.save_adapters(tmp_path / "r4")
    with pytest.raises(ModelLoadError, match="r=4"):
        team(r=8).load_adapters(tmp_path / "r4")
    with pytest.raises(ModelLoadError, match="no adapters"):
        team().load_adapters(tmp_path / "nothing")


def test_from_team_freezes_roles_that_do_not_train():
    roles = (Role(name="proposer"), Role(name="reviewer", trainable=False),
             Role(name="critic", adapter="proposer"))
    model, tokenizer = tiny_model_and_tokenizer()
    tm = TeamModel.from_team(model, tokenizer, Team(roles=roles), r=2)
    assert tm.adapter_names == ("proposer", "reviewer")
    assert tm.frozen == frozenset({"reviewer"})
    assert tm.lora.r == 2
    clash = Team(roles=(Role(name="proposer"), Role(name="critic", adapter="proposer", trainable=False)))
    model, tokenizer = tiny_model_and_tokenizer()
    with pytest.raises(ConfigError, match="disagree on trainable"):
        TeamModel.from_team(model, tokenizer, clash)


def test_constructor_checks():
    model, tokenizer = tiny_model_and_tokenizer()
    with pytest.raises(ConfigError, match="repeated"):
        TeamModel(model, tokenizer, ("proposer", "proposer"))
    with pytest.raises(ConfigError, match="frozen adapters"):
        TeamModel(model, tokenizer, ("proposer",), frozen=("judge",))
    with pytest.raises(ConfigError, match="lora.r"):
        TeamModel(model, tokenizer, ("proposer",), r=0)


def test_the_head_runs_on_real_tokens_only_and_a_capped_head_keeps_its_forward():
    """Llama's logits are its head on the last hidden state, so scoring runs the head on the real
    completion tokens only; Gemma 2 soft-caps its logits after the head, so it is scored through
    its own forward. Both equal the unpadded single-row reference."""
    from transformers import Gemma2Config, Gemma2ForCausalLM

    from tests.tiny import tiny_tokenizer

    llama = team()
    assert llama._body_and_head is not None
    tokenizer = tiny_tokenizer()
    torch.manual_seed(0)
    config = Gemma2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                          pad_token_id=tokenizer.pad_token_id, final_logit_softcapping=0.5)
    gemma = TeamModel(Gemma2ForCausalLM(config).eval(), tokenizer, ["proposer"])
    assert gemma._body_and_head is None
    for tm in (llama, gemma):
        perturb(tm, "proposer", 3)
        for share in (False, True):
            with torch.no_grad():
                logp, mask = tm.completion_logprobs(PROMPTS, COMPLETIONS, adapter="proposer", share_prompts=share)
            assert torch.all(logp[mask == 0] == 0)
            for b, (p, c) in enumerate(zip(PROMPTS, COMPLETIONS, strict=True)):
                # 1e-5: float32 sums of a 2-layer model in another order (padding, shared cache)
                torch.testing.assert_close(logp[b, :len(c)], direct_logprobs(tm, p, c, "proposer"),
                                           atol=1e-5, rtol=0)

"""HFBackend on the tiny model: batching is exact, seeds reproduce, log-probs match the trainer's."""

import numpy as np
import pytest
import torch

from teamplay.agents.backends.hf import HFBackend
from teamplay.agents.team_model import TeamModel
from teamplay.errors import ConfigError
from teamplay.records import ChatMessage, SamplingParams, TurnRequest
from tests.tiny import tiny_model_and_tokenizer

ADAPTERS = ("proposer", "reviewer")


def make_backend(seed=0, **kwargs):
    model, tokenizer = tiny_model_and_tokenizer(seed=seed)
    return HFBackend(TeamModel(model, tokenizer, ADAPTERS), **kwargs)


def request(i: int, adapter: str | None = "proposer", problem_len: int | None = None) -> TurnRequest:
    problem = f"Problem {i}: " + "how many apples? " * (i if problem_len is None else problem_len)
    return TurnRequest(agent="proposer_0", role="proposer", stage="propose", round=0, adapter=adapter,
                       chat=(ChatMessage("system", "You solve problems."), ChatMessage("user", problem),
                             ChatMessage("user", "Answer now.")))


def perturb(backend: HFBackend, adapter: str, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in backend.team_model.adapter_parameters(adapter):
            p.copy_(torch.randn(p.shape, generator=gen))


GREEDY = SamplingParams(max_new_tokens=10)


def test_batched_greedy_equals_one_at_a_time():
    backend = make_backend()
    requests = [request(i) for i in range(8)]  # prompts of 8 different lengths
    lengths = {len(g.prompt_ids) for g in backend.generate(requests, GREEDY)}
    assert len(lengths) == 8
    batched = backend.generate(requests, GREEDY)
    for req, out in zip(requests, batched, strict=True):
        alone = backend.generate([req], GREEDY)[0]
        assert out.completion_ids == alone.completion_ids
        assert out.prompt_ids == alone.prompt_ids
        assert out.logprobs == pytest.approx(alone.logprobs, abs=1e-5)
    micro = make_backend(micro_batch_size=3).generate(requests, GREEDY)
    assert [g.completion_ids for g in micro] == [g.completion_ids for g in batched]


@pytest.mark.parametrize("merge", [True, False])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_shared_prompt_prefix_runs_once_and_changes_nothing(temperature, merge, monkeypatch):
    shared = make_backend(merge_adapters=merge)
    plain = make_backend(share_prompt_prefix=False, merge_adapters=merge)
    perturb(shared, "proposer", 1)
    perturb(plain, "proposer", 1)
    # remainders of different lengths, one of a single token past the common prefix
    requests = [request(i, problem_len=n) for i, n in ((1, 0), (2, 3), (3, 1), (4, 6))]
    params = SamplingParams(max_new_tokens=8, temperature=temperature, seed=5)
    calls = []
    import teamplay.agents.backends.hf as hf

    decode = hf.decode

    def spy(model, keyword, cache, input_ids, attention, **kwargs):
        calls.append((attention, cache.get_seq_length()))
        return decode(model, keyword, cache, input_ids, attention, **kwargs)  # (decoding then grows the cache)

    monkeypatch.setattr(hf, "decode", spy)
    got = shared.generate(requests, params)
    monkeypatch.setattr(hf, "decode", decode)
    want = plain.generate(requests, params)
    ((attention, cached),) = calls
    assert cached >= 8  # the prefix ran once, its cache handed to the decoding loop
    assert attention[:, :cached].eq(1).all() and attention[:, cached:].eq(0).any()
    for a, b in zip(got, want, strict=True):
        assert a.prompt_ids == b.prompt_ids and a.completion_ids == b.completion_ids
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)
    # the behaviour log-probs are still the trainer's recomputation
    with torch.no_grad():
        logp, _ = shared.team_model.completion_logprobs([g.prompt_ids for g in got], [g.completion_ids for g in got],
                                                        adapter="proposer", temperature=max(temperature, 1.0))
    for b, g in enumerate(got):
        torch.testing.assert_close(logp[b, :len(g.logprobs)], torch.tensor(g.logprobs), atol=1e-5, rtol=0)


def test_generation_fields():
    backend = make_backend()
    out = backend.generate([request(2)], GREEDY)[0]
    assert len(out.completion_ids) == len(out.logprobs) == 10  # the random model never says eos here
    assert all(lp <= 0 for lp in out.logprobs)
    assert out.adapter == "proposer" and not out.truncated
    assert out.text == backend.tokenizer.decode(out.completion_ids, skip_special_tokens=True)


def test_completion_stops_after_the_first_stop_token():
    backend = make_backend()
    requests = [request(i) for i in range(4)]
    free = backend.generate(requests, GREEDY)
    stop = free[0].completion_ids[3]  # make the 4th token of the first completion a stop token
    backend.team_model.base_model.generation_config.eos_token_id = [backend.tokenizer.eos_token_id, stop]
    stopped = backend.generate(requests, GREEDY)
    for before, after in zip(free, stopped, strict=True):
        ids = list(before.completion_ids)
        expected = ids[: ids.index(stop) + 1] if stop in ids else ids
        assert list(after.completion_ids) == expected  # stop token included, nothing after it
        assert after.logprobs == pytest.approx(before.logprobs[: len(expected)], abs=1e-6)
    assert len(stopped[0].completion_ids) == 4


def test_seeded_sampling_is_reproducible():
    backend = make_backend()
    requests = [request(i) for i in range(6)]
    params = SamplingParams(max_new_tokens=12, temperature=1.0, seed=7)
    first = backend.generate(requests, params)
    torch.rand(5)  # the global RNG state must not matter
    second = backend.generate(requests, params)
    assert [g.completion_ids for g in first] == [g.completion_ids for g in second]
    other = backend.generate(requests, SamplingParams(max_new_tokens=12, temperature=1.0, seed=8))
    assert [g.completion_ids for g in other] != [g.completion_ids for g in first]


@pytest.mark.parametrize("sampler", ["inverse_cdf", "multinomial"])
def test_a_row_seeded_request_samples_the_same_tokens_whatever_else_is_in_the_call(sampler):
    """``TurnRequest.row_seed``: the row's own stream. Alone, beside other rows (other prompt
    lengths, so other padding), at another place in the batch, in another micro-batch size and
    under another call seed, it samples the same tokens; another row_seed samples others."""
    from dataclasses import replace

    backend = make_backend(sampler=sampler)
    perturb(backend, "proposer", 2)
    mine = replace(request(3), row_seed=11)
    others = [request(i) for i in (1, 5, 7)]
    params = SamplingParams(max_new_tokens=12, temperature=1.0, seed=7)
    alone = backend.generate([mine], params)[0]
    beside = backend.generate([others[0], mine, *others[1:]], params)[1]
    last = backend.generate([*others, mine], replace(params, seed=8))[3]
    small = make_backend(micro_batch_size=2, sampler=sampler)
    perturb(small, "proposer", 2)
    chunked = small.generate([*others, mine], params)[3]
    assert len(alone.completion_ids) > 3  # not an immediate stop: the test compares real samples
    for got in (beside, last, chunked):
        assert got.completion_ids == alone.completion_ids
        # the log-probs follow the row's own logits: equal up to batching's float rounding
        assert got.logprobs == pytest.approx(alone.logprobs, abs=1e-5)
    other_seed = backend.generate([replace(mine, row_seed=12)], params)[0]
    assert other_seed.completion_ids != alone.completion_ids
    # greedy decoding draws nothing: a row_seed changes nothing there
    greedy = backend.generate([mine], GREEDY)[0].completion_ids
    assert greedy == backend.generate([request(3)], GREEDY)[0].completion_ids


@pytest.mark.parametrize("temperature", [0.7, 1.3])
def test_row_seeded_logprobs_are_those_of_the_sampled_distribution(temperature):
    """With own streams the recorder still sees the warped distribution (RowSampler runs after it):
    the behaviour log-probs are the trainer's recomputation at that temperature."""
    from dataclasses import replace

    backend = make_backend()
    perturb(backend, "proposer", 1)
    requests = [replace(request(i), row_seed=100 + i) for i in range(4)]
    gens = backend.generate(requests, SamplingParams(max_new_tokens=10, temperature=temperature))
    with torch.no_grad():
        logp, _ = backend.team_model.completion_logprobs(
            [g.prompt_ids for g in gens], [g.completion_ids for g in gens], adapter="proposer",
            temperature=temperature)
    for b, g in enumerate(gens):
        torch.testing.assert_close(logp[b, : len(g.logprobs)], torch.tensor(g.logprobs), atol=1e-5, rtol=0)


@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.3])
def test_behaviour_logprobs_equal_completion_logprobs(temperature):
    backend = make_backend()
    perturb(backend, "proposer", 1)
    requests = [request(i) for i in range(5)]
    gens = backend.generate(requests, SamplingParams(max_new_tokens=10, temperature=temperature, seed=3))
    with torch.no_grad():
        logp, mask = backend.team_model.completion_logprobs(
            [g.prompt_ids for g in gens], [g.completion_ids for g in gens], adapter="proposer",
            temperature=temperature or 1.0)  # greedy records the T=1 distribution
    for b, g in enumerate(gens):
        torch.testing.assert_close(logp[b, : len(g.logprobs)], torch.tensor(g.logprobs), atol=1e-5, rtol=0)


def test_top_p_logprobs_are_those_of_the_truncated_distribution():
    backend = make_backend()
    gens = backend.generate([request(i) for i in range(4)],
                            SamplingParams(max_new_tokens=10, temperature=1.0, top_p=0.5, seed=3))
    with torch.no_grad():
        full, _ = backend.team_model.completion_logprobs(
            [g.prompt_ids for g in gens], [g.completion_ids for g in gens], adapter="proposer")
    behaviour = torch.nn.utils.rnn.pad_sequence([torch.tensor(g.logprobs) for g in gens], batch_first=True)
    # Renormalising over the nucleus raises every kept token's probability: log p_top_p > log p.
    assert torch.all(behaviour[full != 0] > full[full != 0] + 1e-3)


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_recorded_entropies_are_those_of_the_sampled_distribution(temperature):
    backend = make_backend()
    perturb(backend, "proposer", 1)
    gens = backend.generate([request(i) for i in range(4)],
                            SamplingParams(max_new_tokens=10, temperature=temperature, seed=3, entropies=True))
    unasked = backend.generate([request(i) for i in range(4)],
                               SamplingParams(max_new_tokens=10, temperature=temperature, seed=3))
    assert [g.completion_ids for g in unasked] == [g.completion_ids for g in gens]
    assert all(g.entropies == () for g in unasked)  # not asked for: no full-vocabulary pass
    with torch.no_grad():
        logp_all, _, _ = backend.team_model.completion_logprobs(
            [g.prompt_ids for g in gens], [g.completion_ids for g in gens], adapter="proposer",
            temperature=temperature or 1.0, return_distributions=True)  # [B, C, V]
    entropy = -(logp_all.exp() * logp_all).sum(-1)  # [B, C]
    for b, g in enumerate(gens):
        assert len(g.entropies) == len(g.completion_ids)
        torch.testing.assert_close(torch.tensor(g.entropies), entropy[b, :len(g.entropies)], atol=1e-4, rtol=0)


def test_top_k_entropies_are_finite_and_bounded_by_the_kept_tokens():
    backend = make_backend()
    gens = backend.generate([request(i) for i in range(4)],
                            SamplingParams(max_new_tokens=10, temperature=1.0, top_k=3, seed=3, entropies=True))
    values = np.concatenate([np.asarray(g.entropies) for g in gens])
    # removed tokens have p = 0 (log p = -inf) and add nothing: at most log 3 nats, never NaN
    assert np.isfinite(values).all() and (values >= -1e-6).all() and (values <= np.log(3) + 1e-5).all()


def test_each_adapter_generates_with_its_own_weights():
    backend = make_backend()
    requests = [request(i, adapter=None) for i in range(3)]
    base = backend.generate(requests, GREEDY)
    perturb(backend, "proposer", 1)
    mixed = [request(0, "proposer"), request(0, "reviewer"), request(1, None), request(1, "proposer"),
             request(2, "reviewer")]
    out = backend.generate(mixed, GREEDY)
    assert [g.adapter for g in out] == ["proposer", "reviewer", None, "proposer", "reviewer"]
    # reviewer (untouched, lora_B = 0) and the base model agree; the perturbed proposer does not
    assert out[1].completion_ids == base[0].completion_ids
    assert out[2].completion_ids == base[1].completion_ids
    assert out[4].completion_ids == base[2].completion_ids
    assert out[0].completion_ids != base[0].completion_ids
    assert out[3].completion_ids != base[1].completion_ids
    alone = backend.generate([request(0, "proposer")], GREEDY)[0]
    assert out[0].completion_ids == alone.completion_ids


def test_long_prompts_are_truncated_within_budget():
    backend = make_backend(max_prompt_tokens=120)
    out = backend.generate([request(0, problem_len=30), request(1, problem_len=1)], GREEDY)
    assert out[0].truncated and len(out[0].prompt_ids) <= 120
    assert not out[1].truncated


def test_unknown_adapter_and_bad_options():
    backend = make_backend()
    with pytest.raises(ConfigError, match="adapter 'judge'"):
        backend.generate([request(0, adapter="judge")], GREEDY)
    model, tokenizer = tiny_model_and_tokenizer()
    with pytest.raises(ConfigError, match="micro_batch_size"):
        HFBackend(TeamModel(model, tokenizer, ()), micro_batch_size=0)
    with pytest.raises(ConfigError, match="sampler must be one of"):
        HFBackend(TeamModel(model, tokenizer, ()), sampler="gumbel")


def test_yes_probability_matches_a_direct_forward():
    backend = make_backend(micro_batch_size=2)
    tok = backend.tokenizer
    prompts = ["Is 2 + 2 = 4?", "Is the sky green? Answer yes or no.", "ok"]
    probs = backend.yes_probability(prompts)
    assert probs.shape == (3,)
    for prompt, p in zip(prompts, probs, strict=True):
        text = tok.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                       add_generation_prompt=True)
        ids = torch.tensor([tok(text, add_special_tokens=False)["input_ids"]])
        with torch.no_grad():
            q = torch.softmax(backend.team_model.base_model(input_ids=ids).logits[0, -1].double(), -1)
        y, Y, n, N = (tok.convert_tokens_to_ids(c) for c in "yYnN")  # byte-level: first token = letter
        assert p == pytest.approx(float((q[y] + q[Y]) / (q[y] + q[Y] + q[n] + q[N])), abs=1e-6)
    # Aligning the "y" row of the output head with the last hidden state drives P(yes) to 1.
    base = backend.team_model.base_model
    text = tok.apply_chat_template([{"role": "user", "content": "Is it?"}], tokenize=False,
                                   add_generation_prompt=True)
    with torch.no_grad():
        hidden = base(input_ids=torch.tensor([tok(text, add_special_tokens=False)["input_ids"]]),
                      output_hidden_states=True).hidden_states[-1][0, -1]  # [H]
        base.lm_head.weight[tok.convert_tokens_to_ids("y")] = 100 * hidden / hidden.norm()
    assert backend.yes_probability(["Is it?"])[0] > 0.99


@pytest.mark.parametrize(("top_k", "top_p"), [(0, 1.0), (5, 1.0), (0, 0.8), (7, 0.9)])
def test_sampled_tokens_are_kept_by_generates_own_sampling_processors(top_k, top_p):
    # HFBackend applies temperature / top-k / top-p itself and draws the token after them: every
    # token it samples must be one that generate's own warpers keep at that step (finite score), and
    # its recorded log-prob that token's log-prob under the warped distribution
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    backend = make_backend()
    perturb(backend, "proposer", 1)
    params = SamplingParams(max_new_tokens=10, temperature=0.7, top_k=top_k, top_p=top_p, seed=11)
    gens = backend.generate([request(i) for i in (1, 3, 3, 5)], params)
    warpers = [TemperatureLogitsWarper(0.7), *([TopKLogitsWarper(top_k)] if top_k else []),
               *([TopPLogitsWarper(top_p)] if top_p < 1.0 else [])]
    drawn = 0
    for g in gens:
        ids = torch.tensor([list(g.prompt_ids) + list(g.completion_ids)])  # [1, P + N]
        with torch.no_grad(), backend.team_model.using("proposer"):
            logits = backend.team_model.model(input_ids=ids).logits[0]  # [P + N, V]
        for t, token in enumerate(g.completion_ids):
            step = logits[len(g.prompt_ids) - 1 + t][None].float()  # [1, V]: the scores that chose token t
            for warp in warpers:
                step = warp(ids[:, : len(g.prompt_ids) + t], step)
            assert torch.isfinite(step[0, token])
            assert g.logprobs[t] == pytest.approx(float(torch.log_softmax(step, -1)[0, token]), abs=1e-5)
            drawn += 1
    assert drawn > 20  # real samples were checked, not immediate stops


@pytest.mark.parametrize("streams", ["one", "per row"])
def test_inverse_cdf_draws_each_token_with_its_probability(streams):
    """20,000 draws from a fixed 6-token distribution (one token removed: probability 0): each
    token's frequency is within 4.5 binomial standard deviations of its probability (a false alarm
    has probability below 1e-5 per token; the seeds are fixed, so the test is deterministic), and
    the removed token is never drawn."""
    from teamplay.agents.decode import Streams, inverse_cdf_tokens

    scores = torch.tensor([[2.0, 0.5, -1.0, 1.0, float("-inf"), -3.0]])  # [1, V]
    probs = torch.softmax(scores, -1)[0]
    rows = 200
    log_dist = torch.log_softmax(scores, -1).expand(rows, -1)  # [200, V]: 200 rows a step, 100 steps
    if streams == "one":
        source = Streams(shared=torch.Generator().manual_seed(5))
    else:
        source = Streams(per_row=[torch.Generator().manual_seed(1000 + r) for r in range(rows)])
    counts = torch.zeros(6)
    for _ in range(100):
        counts += torch.bincount(inverse_cdf_tokens(log_dist, source.uniforms(torch.arange(rows), "cpu")),
                                 minlength=6)
    n = rows * 100
    assert counts[4] == 0
    sd = (probs * (1 - probs) / n).sqrt()
    assert torch.all((counts / n - probs).abs() <= 4.5 * sd), (counts / n, probs)


@pytest.mark.parametrize(("top_k", "top_p"), [(0, 1.0), (5, 1.0), (0, 0.8), (7, 0.9)])
def test_the_multinomial_sampler_draws_what_generate_draws(top_k, top_p):
    # sampler multinomial: HFBackend applies temperature / top-k / top-p itself (so that its log-prob
    # recorder runs after them); with the same seed it must draw exactly what generate's own
    # processors and torch.multinomial draw (the tokens of teamplay before inverse_cdf)
    from transformers import GenerationConfig

    from teamplay.agents.prompts import build_reply_ids
    from teamplay.agents.team_model import left_pad

    backend = make_backend(sampler="multinomial")
    perturb(backend, "proposer", 1)
    requests = [request(i) for i in (3, 3, 3)]  # one prompt length: no padding, one micro-batch
    params = SamplingParams(max_new_tokens=10, temperature=0.7, top_k=top_k, top_p=top_p, seed=11)
    ours = backend.generate(requests, params)
    from teamplay.agents.backends.hf import _derive_seed

    prompts = [build_reply_ids(backend.tokenizer, r.chat, backend.max_prompt_tokens)[0] for r in requests]
    input_ids, attention = left_pad(prompts, backend.tokenizer.pad_token_id, backend.team_model.device)
    config = GenerationConfig(do_sample=True, temperature=0.7, top_k=top_k, top_p=top_p, max_new_tokens=10,
                              eos_token_id=list(backend.stop_ids), pad_token_id=backend.tokenizer.pad_token_id)
    torch.manual_seed(_derive_seed(11, "proposer", 0))
    with torch.no_grad(), backend.team_model.using("proposer"):
        out = backend.team_model.model.generate(input_ids=input_ids, attention_mask=attention, generation_config=config)
    for g, row in zip(ours, out[:, input_ids.shape[1]:].tolist(), strict=True):
        assert list(g.completion_ids) == row[: len(g.completion_ids)]


def test_greedy_decoding_gives_generates_tokens_while_finished_rows_leave_the_batch():
    # teamplay's decoding loop drops finished rows from the batch (teamplay.agents.decode); the rows
    # still writing must see what generate shows them: the same greedy tokens, prompts of 4 lengths
    from transformers import GenerationConfig

    from teamplay.agents.prompts import build_reply_ids
    from teamplay.agents.team_model import left_pad

    backend = make_backend(share_prompt_prefix=False)
    perturb(backend, "proposer", 3)
    tok = backend.tokenizer
    requests = [request(i) for i in (1, 2, 4, 7, 2, 1)]
    # the 5th greedy token of the first row becomes an extra stop token: rows stop at different steps
    stop = backend.generate(requests[:1], SamplingParams(max_new_tokens=5))[0].completion_ids[4]
    backend.team_model.base_model.generation_config.eos_token_id = [tok.eos_token_id, stop]
    ours = backend.generate(requests, SamplingParams(max_new_tokens=16))
    lengths = {len(g.completion_ids) for g in ours}
    assert len(lengths) >= 2  # rows did finish at different steps, so the batch did shrink
    prompts = [build_reply_ids(tok, r.chat, backend.max_prompt_tokens)[0] for r in requests]
    input_ids, attention = left_pad(prompts, tok.pad_token_id, backend.team_model.device)
    config = GenerationConfig(do_sample=False, max_new_tokens=16, eos_token_id=list(backend.stop_ids),
                              pad_token_id=tok.pad_token_id)
    with torch.no_grad(), backend.team_model.using("proposer"):
        out = backend.team_model.model.generate(input_ids=input_ids, attention_mask=attention, generation_config=config)
    for g, row in zip(ours, out[:, input_ids.shape[1]:].tolist(), strict=True):
        assert list(g.completion_ids) == row[: len(g.completion_ids)]
        assert len(g.completion_ids) == 16 or g.completion_ids[-1] in backend.stop_ids


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_identical_prompts_run_once_and_each_row_samples_its_own_reply(temperature, monkeypatch):
    """A group's samples of one question: the distinct prompts run once (3 rows for 7 requests),
    and every row's tokens and log-probs equal those of the path that runs every row's prompt."""
    import teamplay.agents.backends.hf as hf

    backend = make_backend()
    perturb(backend, "proposer", 2)
    requests = [request(i, problem_len=n) for i, n in ((1, 2), (1, 2), (2, 5), (1, 2), (2, 5), (3, 1), (3, 1))]
    params = SamplingParams(max_new_tokens=8, temperature=temperature, seed=11)
    prefilled = []
    decode = hf.decode

    def spy(model, keyword, cache, input_ids, attention, **kwargs):
        prefilled.append(input_ids.shape[0])
        return decode(model, keyword, cache, input_ids, attention, **kwargs)

    monkeypatch.setattr(hf, "decode", spy)
    got = backend.generate(requests, params)
    monkeypatch.setattr(HFBackend, "dedupe_prompts", False)
    want = backend.generate(requests, params)
    assert prefilled == [3, 7]
    for a, b in zip(got, want, strict=True):
        assert a.prompt_ids == b.prompt_ids and a.completion_ids == b.completion_ids
        # 1e-5: float32 sums over 3 rows instead of 7 (another blocking of the same products)
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)
    if temperature > 0:  # rows of one prompt draw from their own streams: not all the same reply
        assert len({got[i].completion_ids for i in (0, 1, 3)}) > 1

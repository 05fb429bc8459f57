"""``TurnRequest.reply_prefix`` and proposer_reviewer's ``verdict_prefix``: the prefix is prompt, not
completion; the reply text starts with it; the prompt budget still holds; reviews only;
``proposal_prefix`` and ``instructions`` (shorter prompts) likewise for proposals and turn instructions."""

from __future__ import annotations

import pytest
import torch

from teamplay.agents.backends.hf import HFBackend
from teamplay.agents.prompts import build_prompt_ids, build_reply_ids
from teamplay.agents.team_model import TeamModel
from teamplay.envs.protocols import parse_verdict
from teamplay.envs.protocols.catalog.proposer_reviewer import ProposerReviewer
from teamplay.envs.team_env import TeamEnv
from teamplay.errors import ConfigError
from teamplay.records import ChatMessage, SamplingParams, TurnRequest
from tests.agents import fake_vllm
from tests.envs.fakes import ITEMS, FakeTask, play, scripted
from tests.tiny import save_tiny, tiny_model_and_tokenizer

PREFIX = "Verdict:"
CHAT = (ChatMessage("system", "You review answers."), ChatMessage("user", "What is 3 + 4? " * 6),
        ChatMessage("user", "First line: RIGHT or WRONG."))


def review(prefix: str = PREFIX, adapter: str | None = "reviewer") -> TurnRequest:
    return TurnRequest(agent="reviewer_0", role="reviewer", stage="review", round=1, adapter=adapter,
                       chat=CHAT, expects="verdict", reply_prefix=prefix)


def test_reply_ids_are_the_chat_then_the_prefix_within_the_budget():
    _, tok = tiny_model_and_tokenizer()
    plain, _ = build_prompt_ids(tok, CHAT, 10_000)
    ids, truncated = build_reply_ids(tok, CHAT, 10_000, PREFIX)
    # the tiny tokenizer is byte-level: "Verdict:" is 8 tokens, appended after the generation prompt
    assert ids == plain + tok(PREFIX, add_special_tokens=False)["input_ids"] and len(ids) == len(plain) + 8
    assert not truncated
    budget = len(plain) - 5  # the chat alone fits only after cutting; the prefix takes 8 more tokens
    cut, truncated = build_reply_ids(tok, CHAT, budget, PREFIX)
    assert truncated and len(cut) <= budget and tok.decode(cut).endswith("assistant\n" + PREFIX)
    assert build_reply_ids(tok, CHAT, 10_000, "") == build_prompt_ids(tok, CHAT, 10_000)
    with pytest.raises(ConfigError, match="reply prefix 'Verdict:' has 8 tokens"):
        build_reply_ids(tok, CHAT, 8, PREFIX)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_hf_prefix_is_prompt_and_text_starts_with_it(temperature):
    model, tok = tiny_model_and_tokenizer()
    backend = HFBackend(TeamModel(model, tok, ("reviewer",)))
    params = SamplingParams(max_new_tokens=6, temperature=temperature, seed=2)
    with_prefix, without = backend.generate([review(), review("")], params)
    prefix_ids = tuple(tok(PREFIX, add_special_tokens=False)["input_ids"])
    assert with_prefix.prompt_ids == without.prompt_ids + prefix_ids
    assert len(with_prefix.completion_ids) == len(with_prefix.logprobs) == 6  # the prefix is not generated
    assert with_prefix.text == PREFIX + tok.decode(with_prefix.completion_ids, skip_special_tokens=True)
    # behaviour log-probs are those of the completion given prompt + prefix (what the trainer recomputes)
    with torch.no_grad():
        logp, _ = backend.team_model.completion_logprobs([with_prefix.prompt_ids], [with_prefix.completion_ids],
                                                         adapter="reviewer")
    torch.testing.assert_close(logp[0, :6], torch.tensor(with_prefix.logprobs), atol=1e-5, rtol=0)


def test_vllm_sends_the_prefix_as_prompt_tokens(monkeypatch, tmp_path):
    from teamplay.agents.backends.vllm import VLLMBackend
    from teamplay.agents.models import load_model

    fake = fake_vllm.install(monkeypatch)
    model, tok = load_model(str(save_tiny(tmp_path / "model")), dtype="bfloat16")
    backend = VLLMBackend(TeamModel(model, tok, ("reviewer",)), adapter_dir=tmp_path / "adapters")
    out = backend.generate([review(), review("")], SamplingParams(max_new_tokens=3))
    (call,) = fake.engines[0].calls
    prefix_ids = tok(PREFIX, add_special_tokens=False)["input_ids"]
    assert call.prompts[0] == call.prompts[1] + prefix_ids
    assert out[0].prompt_ids == tuple(call.prompts[0]) and len(out[0].completion_ids) == 3
    assert out[0].text == PREFIX + tok.decode(out[0].completion_ids, skip_special_tokens=True)
    assert out[1].text == tok.decode(out[1].completion_ids, skip_special_tokens=True)


def test_verdict_prefix_goes_to_review_turns_only_and_the_parser_reads_it():
    env = TeamEnv(FakeTask(), "proposer_reviewer", protocol_options={"rounds": 3, "verdict_prefix": PREFIX})
    seen = []
    texts = {("proposer_0", 0): "The answer is 8.", ("reviewer_0", 1): f"{PREFIX} WRONG, it is 7.",
             ("proposer_0", 2): "The answer is 7."}

    def policy(request):
        seen.append(request)
        return scripted(texts)(request)

    ep = play(env, policy, item=ITEMS[3])  # "What is 3 + 4?"
    assert [(r.stage, r.reply_prefix) for r in seen] == [("propose", ""), ("review", PREFIX), ("propose", "")]
    assert [v["verdict"] for v in ep.metadata["verdicts"]] == ["WRONG"]
    assert seen[2].metadata["last_verdict"] == "WRONG" and ep.reward == 1.0
    default = TeamEnv(FakeTask(), "proposer_reviewer", protocol_options={"rounds": 3})
    seen.clear()
    play(default, policy, item=ITEMS[3])
    assert {r.reply_prefix for r in seen} == {""}  # the default adds nothing


@pytest.mark.parametrize("prefix", ["Verdict:", "Verdict -", "**"])
def test_accepted_prefixes_parse_both_verdicts(prefix):
    ProposerReviewer(verdict_prefix=prefix)
    assert parse_verdict(prefix + " RIGHT") == "RIGHT" and parse_verdict(prefix + " WRONG") == "WRONG"


@pytest.mark.parametrize(("prefix", "why"), [("RIGHT:", "already reads as a verdict"),
                                             ("Answer:", "does not parse as a verdict"),
                                             ("Verdict:\n", "spans lines; a reply prefix is the start of one line")])
def test_prefixes_that_would_break_the_parser_are_refused(prefix, why):
    with pytest.raises(ConfigError, match=f"verdict_prefix.*{why}"):
        ProposerReviewer(verdict_prefix=prefix)


def test_proposal_prefix_and_instructions_shape_each_turn():
    short = {"solve": "Give the answer.", "review": "Is {author}'s answer {answer} right?",
             "revise_wrong": "{answer} is WRONG. Correct it.", "revise_right": "{answer} is RIGHT. Restate it."}
    env = TeamEnv(FakeTask(), "proposer_reviewer",
                  protocol_options={"rounds": 5, "verdict_prefix": PREFIX, "proposal_prefix": "The answer is",
                                    "instructions": short})
    seen = []
    # the policy writes the whole text, prefix included, as a model backend returns it
    texts = {("proposer_0", 0): "The answer is 8.", ("reviewer_0", 1): f"{PREFIX} WRONG",
             ("proposer_0", 2): "The answer is 7.", ("reviewer_0", 3): f"{PREFIX} RIGHT",
             ("proposer_0", 4): "The answer is 7."}

    def policy(request):
        seen.append(request)
        return scripted(texts)(request)

    ep = play(env, policy, item=ITEMS[3])  # "What is 3 + 4?"
    assert [r.reply_prefix for r in seen] == ["The answer is", PREFIX, "The answer is", PREFIX, "The answer is"]
    assert [r.chat[-1].content for r in seen] == [
        "Give the answer.", "Is proposer_0's answer 8 right?", "8 is WRONG. Correct it.",
        "Is proposer_0's answer 7 right?", "7 is RIGHT. Restate it."]
    assert ep.reward == 1.0 and [p["answer"] for p in ep.metadata["proposals"]] == ["8", "7", "7"]
    # a key left out keeps its default text
    env = TeamEnv(FakeTask(), "proposer_reviewer", protocol_options={"rounds": 3, "instructions": {"solve": "Go."}})
    seen.clear()
    play(env, policy, item=ITEMS[3])
    assert seen[0].chat[-1].content == "Go." and seen[1].chat[-1].content.startswith("Review the current proposal")


@pytest.mark.parametrize(("options", "why"), [
    ({"instructions": {"critique": "x"}}, "unknown instruction key.*critique"),
    ({"instructions": {"review": "Is {answr} right?"}}, r"unknown field.*\{answr\}"),
    ({"instructions": {"review": "Is {answer right?"}}, "instructions.review"),
    ({"instructions": {"solve": "  "}}, "instructions.solve is empty"),
    ({"proposal_prefix": "The answer\nis"}, "spans lines"),
])
def test_bad_instructions_and_prefixes_are_refused_at_load(options, why):
    with pytest.raises(ConfigError, match=why):
        ProposerReviewer(**options)

"""Class 7: huge inputs stay bounded: prompt fitting costs the same tokenizer work for 1 MB or 20 MB."""

from __future__ import annotations

import json

from teamplay.agents.prompts import CHARS_PER_TOKEN, fit_chat
from teamplay.records import ChatMessage
from tests.reliability.helpers import invoke
from tests.tiny import tiny_tokenizer

BUDGET = 256


class CountingTokenizer:
    """Forwards to a real tokenizer and counts encode passes and the characters they read."""

    def __init__(self, tokenizer) -> None:
        self._tokenizer = tokenizer
        self.passes = 0
        self.characters = 0

    def __call__(self, text, **kwargs):
        self.passes += 1
        self.characters += len(text)
        return self._tokenizer(text, **kwargs)

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)


def fit_problem(n_chars: int) -> tuple[CountingTokenizer, object]:
    tokenizer = CountingTokenizer(tiny_tokenizer())
    problem = ("0123456789 " * (n_chars // 11 + 1))[:n_chars]
    chat = (ChatMessage("system", "You solve problems."), ChatMessage("user", problem),
            ChatMessage("user", "[reviewer_0, round 1]: " + "x" * 3000), ChatMessage("user", "Answer."))
    return tokenizer, fit_chat(tokenizer, chat, BUDGET)


def test_fitting_costs_the_same_tokenizer_work_for_1_mb_and_20_mb():
    small_tok, small = fit_problem(1_000_000)
    big_tok, big = fit_problem(20_000_000)
    assert len(small.ids) <= BUDGET and len(big.ids) <= BUDGET and big.truncated
    assert big_tok.passes == small_tok.passes
    # the omission note's digit count is all that differs ("[... 999... characters omitted ...]")
    assert abs(big_tok.characters - small_tok.characters) < 10 * big_tok.passes
    # every pass reads a bounded text: at most the whole chat with each cut text at 2 * cap characters
    cap = CHARS_PER_TOKEN * BUDGET
    assert big_tok.characters <= big_tok.passes * (4 * 2 * cap + 200)
    # what survives is the problem's start and end around a note naming the omitted characters
    problem = big.chat[1].content
    assert problem.startswith("0123456789") and "characters omitted ...]" in problem


def test_a_problem_near_the_row_limit_through_the_hf_backend_is_truncated_and_answered(tmp_path, tiny_model):
    # 0.9 MB, about 200,000 tokens: under the task files' 1 MiB row limit (a longer row is one
    # error naming its line, tests/tasks/test_bad_files.py), far over any prompt budget
    data = tmp_path / "huge.jsonl"
    question = "How much is 2 + 2? " + "Lorem ipsum dolor sit amet. " * 32_000
    assert 0.8e6 < len(question) < 2 ** 20
    data.write_text(json.dumps({"question": question, "answer": "#### 4"}) + "\n")
    out = tmp_path / "ev"
    result = invoke("eval", "--task", "gsm8k", "--source", data, "--backend", "hf", "--model", tiny_model,
                    "--max-new-tokens", 2, "--set", "backend.max_prompt_tokens=512", "-o", out)
    assert result.exit_code == 0, result.output
    assert json.loads((out / "results.json").read_text())["metrics"]["episodes"] == 1

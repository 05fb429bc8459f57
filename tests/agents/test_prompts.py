"""The prompt truncation rule, with token counts worked by hand on the byte-level tiny tokenizer.

Token arithmetic of the tiny ChatML template (one token per ASCII character):
a message costs <|im_start|> (1) + role + "\\n" (1) + content + <|im_end|> (1) + "\\n" (1), i.e.
content + 8 for "user", content + 10 for "system"; the generation prompt
"<|im_start|>assistant\\n" costs 1 + 9 + 1 = 11.
"""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from teamplay.agents.prompts import (
    MIN_KEPT_TOKENS,
    PromptTooLongError,
    build_prompt_ids,
    fit_chat,
    render_ids,
)
from teamplay.records import ChatMessage
from tests.tiny import tiny_tokenizer

TOK = tiny_tokenizer()
SYSTEM = ChatMessage("system", "S" * 10)  # 10 + 10 = 20 tokens
PROBLEM = ChatMessage("user", "P" * 20)  # 20 + 8 = 28 tokens
INSTRUCTION = ChatMessage("user", "Go")  # 2 + 8 = 10 tokens


def entry(i: int) -> ChatMessage:
    # 32 characters -> 40 tokens; odd entries are this agent's own (assistant) messages: 32 + 13 = 45
    content = f"[solver_{i}, round 1]: " + str(i) * 11
    assert len(content) == 32
    return ChatMessage("assistant" if i % 2 else "user", content)


def test_render_counts_match_the_hand_arithmetic():
    assert len(render_ids(TOK, [SYSTEM, PROBLEM, INSTRUCTION])) == 20 + 28 + 10 + 11
    assert len(render_ids(TOK, [SYSTEM, PROBLEM, entry(0), entry(1), INSTRUCTION])) == 69 + 40 + 45


def test_a_chat_that_fits_is_unchanged():
    chat = (SYSTEM, PROBLEM, entry(0), INSTRUCTION)
    ids, truncated = build_prompt_ids(TOK, chat, max_prompt_tokens=109)  # 69 + 40 = 109: exactly fits
    assert not truncated
    assert ids == render_ids(TOK, chat)


def test_oldest_transcript_entries_are_dropped_first():
    transcript = tuple(entry(i) for i in range(5))  # 40 + 45 + 40 + 45 + 40 = 210 tokens
    chat = (SYSTEM, PROBLEM, *transcript, INSTRUCTION)
    assert len(render_ids(TOK, chat)) == 69 + 210  # 279 > 200
    # "[k earlier messages omitted]" is 28 characters -> 36 tokens. Dropping k entries leaves
    # 69 + 36 + (tokens of entries k..4): k=1: 275, k=2: 230, k=3: 190 <= 200.
    fitted = fit_chat(TOK, chat, max_prompt_tokens=200)
    assert fitted.truncated
    assert fitted.chat == (SYSTEM, PROBLEM, ChatMessage("user", "[3 earlier messages omitted]"),
                           entry(3), entry(4), INSTRUCTION)
    assert len(fitted.ids) == 69 + 36 + 45 + 40


def test_the_newest_entry_is_then_shortened_from_the_middle():
    chat = (SYSTEM, PROBLEM, ChatMessage("user", "A" * 150 + "B" * 150), INSTRUCTION)
    # Fixed parts 69 + entry overhead 8 leave 150 - 77 = 73 content tokens. Keeping m of the 300
    # tokens costs m + len("\n[... N tokens omitted ...]\n") = m + 27 + digits(N), N = 300 - m:
    # m + 30 <= 73 -> m = 43 (22 from the start, 21 from the end), N = 257.
    fitted = fit_chat(TOK, chat, max_prompt_tokens=150)
    expected = "A" * 22 + "\n[... 257 tokens omitted ...]\n" + "B" * 21
    assert fitted.chat == (SYSTEM, PROBLEM, ChatMessage("user", expected), INSTRUCTION)
    assert len(fitted.ids) == 150


def test_the_problem_is_shortened_last():
    chat = (SYSTEM, ChatMessage("user", "Q" * 100 + "R" * 100), entry(0), INSTRUCTION)
    # The newest entry (32 tokens) would not get shorter: cutting it to 16 tokens adds a 29-token
    # note, so it stays whole. Fixed: system 20 + entry 40 + instruction 10 + prompt 11 = 81, and
    # the problem costs 8 + m + 27 + digits(200 - m). Budget 180: m + 30 <= 91 -> m = 61
    # (31 from the start, 30 from the end), N = 139.
    fitted = fit_chat(TOK, chat, max_prompt_tokens=180)
    problem = "Q" * 31 + "\n[... 139 tokens omitted ...]\n" + "R" * 30
    assert fitted.chat == (SYSTEM, ChatMessage("user", problem), entry(0), INSTRUCTION)
    assert len(fitted.ids) == 180
    # Budget 130: m + 30 <= 41 -> m = 11 < MIN_KEPT_TOKENS = 16: nothing left to cut.
    with pytest.raises(PromptTooLongError, match="max_prompt_tokens=130"):
        fit_chat(TOK, chat, max_prompt_tokens=130)


def test_system_and_instruction_are_never_cut():
    chat = (ChatMessage("system", "S" * 300), PROBLEM, INSTRUCTION)
    with pytest.raises(PromptTooLongError, match=r"system prompt \(300 tokens\)"):
        build_prompt_ids(TOK, chat, max_prompt_tokens=100)


def test_bad_arguments():
    with pytest.raises(ValueError, match="empty chat"):
        build_prompt_ids(TOK, [], 10)
    with pytest.raises(ValueError, match="max_prompt_tokens"):
        build_prompt_ids(TOK, [INSTRUCTION], 0)


_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=120)


@settings(max_examples=60, deadline=None)
@given(system=_text, problem=_text, transcript=st.lists(_text, max_size=6), instruction=_text,
       budget=st.integers(min_value=40, max_value=400))
def test_never_overflows_and_keeps_system_and_instruction(system, problem, transcript, instruction, budget):
    chat = (ChatMessage("system", system), ChatMessage("user", problem),
            *(ChatMessage("user" if i % 2 else "assistant", t) for i, t in enumerate(transcript)),
            ChatMessage("user", instruction))
    full = render_ids(TOK, chat)
    try:
        fitted = fit_chat(TOK, chat, budget)
    except PromptTooLongError:
        # Only when even the minimal chat (system, instruction, a 16-token problem, a note and a
        # 16-token newest entry, each with its shortening note) cannot fit.
        minimal = render_ids(TOK, (chat[0], chat[-1]))
        assert len(full) > budget
        assert len(minimal) + 2 * (MIN_KEPT_TOKENS + 30 + 13) + 36 > budget
        return
    assert len(fitted.ids) <= budget
    assert fitted.truncated == (len(full) > budget)
    assert fitted.chat[0] == chat[0] and fitted.chat[-1] == chat[-1]
    assert list(fitted.ids) == render_ids(TOK, fitted.chat)

"""Chat-template prompts that fit a token budget.

The chat of a ``TurnRequest`` follows one layout (set by the protocols):

    chat[0]    system: the role prompt                               never dropped, never cut
    chat[1]    user: the problem                                     cut from the middle, last resort
    chat[2:-1] transcript: others' messages as user messages with a
               "[reviewer_0, round 2]: ..." header, this agent's own
               earlier messages as assistant messages                oldest dropped first
    chat[-1]   user: the instruction for this turn                   never dropped, never cut

A chat of two messages is (system, instruction); of one, the instruction alone.

Truncation rule of ``fit_chat`` (each step runs only while the rendered prompt is over budget):

1. Drop the oldest transcript entries, one at a time, replacing all dropped ones by a single user
   note ``"[N earlier messages omitted]"``; the newest entry is kept (it is usually the answer
   this turn responds to).
2. Shorten the longest remaining transcript entry from the middle: keep its first and last tokens
   around ``"\\n[... N tokens omitted ...]\\n"``, down to ``MIN_KEPT_TOKENS`` content tokens.
3. Shorten the problem the same way, down to ``MIN_KEPT_TOKENS`` tokens.
4. Still over budget: raise ``PromptTooLongError`` with the token count of each part. This covers
   a system prompt plus instruction that alone exceed the budget.

Every candidate is measured by rendering the whole chat with the tokenizer's chat template and
encoding it, so a returned prompt never exceeds the budget, whatever the template adds.

Cost is bounded whatever the size of the texts: a problem or transcript entry longer than
``2 * CHARS_PER_TOKEN * max_prompt_tokens`` characters could not fit for any tokenizer averaging
at most ``CHARS_PER_TOKEN`` characters per token, so only its first and last
``CHARS_PER_TOKEN * max_prompt_tokens`` characters are ever tokenized (its note then counts the
omitted characters: ``"[... N characters omitted ...]"``). Each text is tokenized once; every
search step re-renders only the bounded candidate. A system prompt or instruction that long is
refused at once. So a 20 MB problem costs the same few tokenizer passes as a 100 kB one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from transformers import PreTrainedTokenizerBase

from teamplay.errors import ConfigError
from teamplay.records import ChatMessage

#: content tokens a shortened message keeps at least (half from its start, half from its end)
MIN_KEPT_TOKENS = 16
#: characters per token assumed at most when deciding that a text can be cut by characters first
CHARS_PER_TOKEN = 16


class PromptTooLongError(ConfigError):
    """The parts of a chat that are never cut (system prompt, instruction) do not fit the budget."""


@dataclass(frozen=True)
class FittedPrompt:
    """A chat cut to a token budget.

    Fields:
        chat: the messages actually rendered (with the omission note / shortened texts).
        ids: prompt token ids, shape [P] with P <= the budget; ends with the generation prompt.
        truncated: whether anything was dropped or shortened.
    """

    chat: tuple[ChatMessage, ...]
    ids: tuple[int, ...]
    truncated: bool


def render_ids(tokenizer: PreTrainedTokenizerBase, chat: Sequence[ChatMessage]) -> list[int]:
    """Token ids of ``chat`` rendered with the chat template, ending with the assistant generation prompt.

    The template's text is encoded without adding special tokens: the template itself decides
    whether a bos token is written (adding it twice would change the model's input).
    """
    text = tokenizer.apply_chat_template(
        [{"role": m.role, "content": m.content} for m in chat], tokenize=False, add_generation_prompt=True)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def build_prompt_ids(tokenizer: PreTrainedTokenizerBase, chat: Sequence[ChatMessage],
                     max_prompt_tokens: int) -> tuple[list[int], bool]:
    """``(ids, truncated)`` of ``chat`` cut to ``max_prompt_tokens`` by the module's truncation rule."""
    fitted = fit_chat(tokenizer, chat, max_prompt_tokens)
    return list(fitted.ids), fitted.truncated


def build_reply_ids(tokenizer: PreTrainedTokenizerBase, chat: Sequence[ChatMessage], max_prompt_tokens: int,
                    reply_prefix: str = "") -> tuple[list[int], bool]:
    """``(ids, truncated)``: ``chat`` cut to the budget left by ``reply_prefix``, then the prefix's tokens.

    The prefix goes after the assistant generation prompt, so the model continues a reply that
    already starts with it; ``len(ids) <= max_prompt_tokens`` still holds. The prefix is encoded
    on its own (no special tokens), exactly as written.
    """
    if not reply_prefix:
        return build_prompt_ids(tokenizer, chat, max_prompt_tokens)
    prefix = _content_ids(tokenizer, reply_prefix)
    if len(prefix) >= max_prompt_tokens:
        raise PromptTooLongError(f"the reply prefix {reply_prefix!r} has {len(prefix)} tokens; it cannot fit "
                                 f"max_prompt_tokens={max_prompt_tokens}")
    ids, truncated = build_prompt_ids(tokenizer, chat, max_prompt_tokens - len(prefix))
    return ids + prefix, truncated


def fit_chat(tokenizer: PreTrainedTokenizerBase, chat: Sequence[ChatMessage],
             max_prompt_tokens: int) -> FittedPrompt:
    """Apply the truncation rule of the module docstring.

    Raises:
        ValueError: empty chat or ``max_prompt_tokens < 1``.
        PromptTooLongError: the chat does not fit even with the transcript reduced to its newest
            entry and the newest entry and the problem shortened to ``MIN_KEPT_TOKENS`` tokens.
    """
    if not chat:
        raise ValueError("cannot build a prompt from an empty chat")
    if max_prompt_tokens < 1:
        raise ValueError(f"max_prompt_tokens must be >= 1, got {max_prompt_tokens}")
    chat = tuple(chat)
    cap = CHARS_PER_TOKEN * max_prompt_tokens
    fixed = (0, len(chat) - 1) if len(chat) >= 2 else (0,)
    for index in fixed:
        if len(chat[index].content) > 2 * cap:
            name = "system prompt" if index == 0 and len(chat) >= 2 else "instruction"
            raise PromptTooLongError(
                f"the {name} has {len(chat[index].content)} characters; it is never cut and cannot fit "
                f"max_prompt_tokens={max_prompt_tokens}; raise max_prompt_tokens or shorten it")
    # every cuttable text, tokenized once (only its two ends when it is huge)
    parts = {i: _Text.of(tokenizer, chat[i].content, cap) for i in range(1, len(chat) - 1)}
    chat = tuple(ChatMessage(m.role, parts[i].full()) if i in parts else m for i, m in enumerate(chat))
    precut = any(p.precut for p in parts.values())
    ids = render_ids(tokenizer, chat)
    if len(ids) <= max_prompt_tokens:
        return FittedPrompt(chat, tuple(ids), precut)

    head = chat[:1] if len(chat) >= 2 else ()
    problem = chat[1:2] if len(chat) >= 3 else ()
    transcript = chat[2:-1]
    instruction = chat[-1:]

    def assemble(problem_: tuple[ChatMessage, ...], dropped: int,
                 kept: tuple[ChatMessage, ...]) -> tuple[ChatMessage, ...]:
        note = (ChatMessage("user", f"[{dropped} earlier messages omitted]"),) if dropped else ()
        return head + problem_ + note + kept + instruction

    def fits(candidate: tuple[ChatMessage, ...]) -> FittedPrompt | None:
        ids_ = render_ids(tokenizer, candidate)
        return FittedPrompt(candidate, tuple(ids_), True) if len(ids_) <= max_prompt_tokens else None

    # 1. Drop the oldest transcript entries, keeping the newest one.
    dropped = 0
    for dropped in range(1, len(transcript)):
        found = fits(assemble(problem, dropped, transcript[dropped:]))
        if found:
            return found
    kept = transcript[dropped:]
    kept_parts = [parts[2 + dropped + j] for j in range(len(kept))]

    # 2. Shorten the longest remaining transcript entry from the middle.
    if kept:
        lengths = [p.n_tokens for p in kept_parts]
        longest = lengths.index(max(lengths))

        def with_entry(keep: int) -> tuple[ChatMessage, ...]:
            short = ChatMessage(kept[longest].role, kept_parts[longest].shortened(tokenizer, keep))
            return assemble(problem, dropped, kept[:longest] + (short,) + kept[longest + 1:])

        found = _largest_fitting(with_entry, fits, lengths[longest])
        if found:
            return found
        kept = kept[:longest] + (ChatMessage(kept[longest].role, kept_parts[longest].shortened(
            tokenizer, MIN_KEPT_TOKENS)),) + kept[longest + 1:]

    # 3. Shorten the problem from the middle.
    if problem:
        def with_problem(keep: int) -> tuple[ChatMessage, ...]:
            short = ChatMessage(problem[0].role, parts[1].shortened(tokenizer, keep))
            return assemble((short,), dropped, kept)

        found = _largest_fitting(with_problem, fits, parts[1].n_tokens)
        if found:
            return found

    # 4. Nothing left to cut.
    sizes = {
        "system": len(_content_ids(tokenizer, head[0].content)) if head else 0,
        "instruction": len(_content_ids(tokenizer, instruction[0].content)),
        "problem": parts[1].n_tokens if problem else 0,
    }
    raise PromptTooLongError(
        f"prompt of {len(ids)} tokens cannot be cut to max_prompt_tokens={max_prompt_tokens}: the system "
        f"prompt ({sizes['system']} tokens) and the instruction ({sizes['instruction']} tokens) are never "
        f"cut, and the problem ({sizes['problem']} tokens) and newest transcript entry keep at least "
        f"{MIN_KEPT_TOKENS} tokens each; raise max_prompt_tokens or shorten the role prompt"
    )


def _content_ids(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


@dataclass(frozen=True)
class _Text:
    """A cuttable message text and its token ids, computed once.

    Fields:
        text: the original text.
        head: ids of the whole text; of its first ``cap`` characters when ``precut``.
        tail: ids of its last ``cap`` characters when ``precut``; empty otherwise.
        precut: the text has more than ``2 * cap`` characters, so its middle is never tokenized.
    """

    text: str
    head: tuple[int, ...]
    tail: tuple[int, ...]
    precut: bool
    cap: int

    @classmethod
    def of(cls, tokenizer: PreTrainedTokenizerBase, text: str, cap: int) -> _Text:
        if len(text) <= 2 * cap:
            return cls(text, tuple(_content_ids(tokenizer, text)), (), False, cap)
        return cls(text, tuple(_content_ids(tokenizer, text[:cap])),
                   tuple(_content_ids(tokenizer, text[-cap:])), True, cap)

    @property
    def n_tokens(self) -> int:
        """Tokens available to keep (all of them, or those of both ends when precut)."""
        return len(self.head) + len(self.tail)

    def full(self) -> str:
        """The text as it enters the prompt before any token cut: whole, or its two ends."""
        return self._ends(self.text[:self.cap], self.text[-self.cap:]) if self.precut else self.text

    def shortened(self, tokenizer: PreTrainedTokenizerBase, keep: int) -> str:
        """The text with its middle replaced by a note, keeping ``keep`` tokens (first half + last half).

        Unchanged when the shortened text would not have fewer tokens (a text of little more than
        ``keep`` tokens: the note costs more than it saves). Cuts fall on token boundaries, so a
        byte-level tokenizer may split a multi-byte character at a cut (U+FFFD).
        """
        first = (keep + 1) // 2
        last = keep - first
        if self.precut:
            first, last = min(first, len(self.head)), min(last, len(self.tail))
            return self._ends(tokenizer.decode(self.head[:first]),
                              tokenizer.decode(self.tail[len(self.tail) - last:]) if last else "")
        ids = self.head
        if len(ids) <= keep:
            return self.text
        start = tokenizer.decode(ids[:first])
        end = tokenizer.decode(ids[len(ids) - last:]) if last else ""
        short = f"{start}\n[... {len(ids) - keep} tokens omitted ...]\n{end}"
        return short if len(_content_ids(tokenizer, short)) < len(ids) else self.text

    def _ends(self, start: str, end: str) -> str:
        return f"{start}\n[... {len(self.text) - len(start) - len(end)} characters omitted ...]\n{end}"


def _largest_fitting(build, fits, n_tokens: int) -> FittedPrompt | None:
    """Binary search of the largest ``keep`` in [MIN_KEPT_TOKENS, n_tokens) whose chat fits.

    The rendered length grows with ``keep`` up to tokenizer merges at the cut; whatever is returned
    was measured to fit, so an off-by-one in that monotonicity can only cut a little more.
    """
    low, high = MIN_KEPT_TOKENS, n_tokens - 1
    if high < low:
        return None
    best = fits(build(low))
    if best is None:
        return None
    while low < high:
        mid = (low + high + 1) // 2
        found = fits(build(mid))
        if found:
            best, low = found, mid
        else:
            high = mid - 1
    return best

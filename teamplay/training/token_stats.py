"""Token statistics for token-level credit, computed once per step in one batched no-grad pass.

The per-token log-probs of the behaviour policy come free with every message (recorded at
generation). Entropies, reference log-probs and the Hellinger distance to the reference need the
full next-token distributions; :func:`compute_token_stats` scores the step's messages in chunks
(grouped by adapter, left-padded batches, the same scoring path as the update) with the adapter
on, and again with adapters disabled when the reference is needed, and only for the statistics a
configured token method declares. Before the first optimiser step of a step the adapter is the
policy that generated the rollouts, so these describe the behaviour policy.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Sequence

import numpy as np
import torch

from teamplay.credit.token import TokenStats
from teamplay.records import Message


def compute_token_stats(team_model, messages: Sequence[Message], needs: Collection[str], temperature: float,
                        chunk: int = 8, hints: Sequence[Sequence[int]] | None = None) -> list[TokenStats]:
    """One :class:`TokenStats` per message (same order); each message needs completion tokens.

    ``needs`` is a subset of {"entropies", "ref_logprobs", "hellinger", "text_offsets",
    "teacher_logprobs"}; with none of the model statistics no model pass is made ("text_offsets"
    only decodes with the tokenizer). ``"teacher_logprobs"`` scores each completion after its
    prompt followed by ``hints[i]`` (token ids of the reference-answer hint), with the adapter on.
    Memory: one chunk's [chunk, C, V] distributions (twice with the reference).
    """
    needs = set(needs)
    out: list[TokenStats | None] = [None] * len(messages)
    texts = [text_offsets(team_model.tokenizer, m.completion_ids) for m in messages] \
        if "text_offsets" in needs else [(None, None)] * len(messages)
    teacher: list[np.ndarray | None] = [None] * len(messages)
    if "teacher_logprobs" in needs:
        if hints is None or len(hints) != len(messages):
            raise ValueError("teacher_logprobs need one hint (token ids) per message")
        teacher = _teacher_logprobs(team_model, messages, hints, temperature, chunk)
    if not needs & {"entropies", "ref_logprobs", "hellinger"}:
        return [TokenStats(logprobs=np.asarray(m.logprobs, dtype=np.float64), text=t, token_ends=e,
                           teacher_logprobs=teacher[i])
                for i, (m, (t, e)) in enumerate(zip(messages, texts, strict=True))]
    by_adapter: dict[str, list[int]] = defaultdict(list)
    for i, m in enumerate(messages):
        if not m.completion_ids:
            raise ValueError(f"message {i} has no completion tokens; token statistics need some")
        by_adapter[m.adapter].append(i)
    want_ref = bool(needs & {"ref_logprobs", "hellinger"})
    with torch.no_grad():
        for adapter, idx in sorted(by_adapter.items()):
            for k in range(0, len(idx), chunk):
                part = idx[k:k + chunk]
                prompts = [list(messages[i].prompt_ids) for i in part]
                completions = [list(messages[i].completion_ids) for i in part]
                lp, targets, _ = team_model.completion_logprobs(prompts, completions, adapter=adapter,
                                                                temperature=temperature,
                                                                return_distributions=True)  # [b, C, V]
                entropy = -(lp.exp() * lp).sum(-1) if "entropies" in needs else None  # [b, C]
                current = lp.gather(-1, targets[..., None]).squeeze(-1)  # [b, C]
                ref_tok = hell = None
                if want_ref:
                    with team_model.disabled_adapters():
                        lq, _, _ = team_model.completion_logprobs(prompts, completions, adapter=None,
                                                                  temperature=temperature,
                                                                  return_distributions=True)  # [b, C, V]
                    ref_tok = lq.gather(-1, targets[..., None]).squeeze(-1)  # [b, C]
                    if "hellinger" in needs:
                        # H^2 = 1 - sum sqrt(p q) = 1/2 sum (sqrt p - sqrt q)^2: the second form is
                        # exactly 0 for equal distributions (the first leaves sqrt(rounding) ~ 3e-4)
                        h2 = 0.5 * ((0.5 * lp).exp() - (0.5 * lq).exp()).pow(2).sum(-1)  # [b, C]
                        hell = torch.sqrt(h2.clamp(min=0.0, max=1.0))
                for row, i in enumerate(part):
                    n = len(messages[i].completion_ids)
                    out[i] = TokenStats(
                        logprobs=np.asarray(messages[i].logprobs, dtype=np.float64),
                        entropies=None if entropy is None else entropy[row, :n].double().cpu().numpy(),
                        ref_logprobs=(ref_tok[row, :n].double().cpu().numpy()
                                      if ref_tok is not None and "ref_logprobs" in needs else None),
                        hellinger=None if hell is None else hell[row, :n].double().cpu().numpy(),
                        text=texts[i][0], token_ends=texts[i][1], teacher_logprobs=teacher[i],
                        current_logprobs=current[row, :n].double().cpu().numpy())
    return out  # type: ignore[return-value]


def _teacher_logprobs(team_model, messages: Sequence[Message], hints: Sequence[Sequence[int]], temperature: float,
                      chunk: int) -> list[np.ndarray]:
    """Log-probs [C] of each completion after ``prompt + hint`` under the message's own adapter."""
    out: list[np.ndarray | None] = [None] * len(messages)
    by_adapter: dict[str, list[int]] = defaultdict(list)
    for i, m in enumerate(messages):
        by_adapter[m.adapter].append(i)
    with torch.no_grad():
        for adapter, idx in sorted(by_adapter.items()):
            for k in range(0, len(idx), chunk):
                part = idx[k:k + chunk]
                logp, _ = team_model.completion_logprobs(
                    [list(messages[i].prompt_ids) + list(hints[i]) for i in part],
                    [list(messages[i].completion_ids) for i in part], adapter=adapter, temperature=temperature)
                for row, i in enumerate(part):
                    out[i] = logp[row, :len(messages[i].completion_ids)].double().cpu().numpy()
    return out  # type: ignore[return-value]


def text_offsets(tokenizer, ids: Sequence[int]) -> tuple[str, np.ndarray]:
    """The decoded completion and, per token, the length of the decoding of the tokens up to it.

    Prefixes are decoded whole (not token by token) so multi-byte characters split across tokens
    land on the token that completes them; a prefix ending mid-character may decode longer than the
    next one, so the ends are made non-decreasing and capped at the full text's length.
    """
    text = tokenizer.decode(list(ids), skip_special_tokens=True)
    ends = np.array([len(tokenizer.decode(list(ids[:j + 1]), skip_special_tokens=True)) for j in range(len(ids))])
    ends = np.minimum(np.maximum.accumulate(ends), len(text)) if len(ends) else ends
    return text, ends.astype(np.int64)

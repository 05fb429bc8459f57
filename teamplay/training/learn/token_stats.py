"""Token statistics for token-level credit: what generation recorded, plus at most the passes a method needs.

The per-token log-probs and entropies of the behaviour policy come free with every message the
HF backend generates (``Message.logprobs``, ``Message.entropies``, from the distribution it sampled).
Reference log-probs and the Hellinger distance to the reference need the reference's full
next-token distributions (and, for the Hellinger distance, the policy's); :func:`compute_token_stats`
scores the step's messages in chunks (grouped by adapter, left-padded batches, the same scoring
path as the update), no-grad, and only for the statistics a configured token method declares and
the messages lack. Before the first optimiser step of a step the adapter is the policy that
generated the rollouts, so a policy pass describes the behaviour policy.
"""

from __future__ import annotations

import dataclasses
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
    "teacher_logprobs"}. Only what the recorded messages lack costs a model pass:

    * entropies recorded at generation (``Message.entropies``, the HF backend) are used as they are;
      the policy is scored again only for the Hellinger distance (it needs the full distribution)
      or for messages without recorded entropies (the vLLM backend);
    * ``ref_logprobs`` / ``hellinger``: one pass with adapters disabled;
    * ``"teacher_logprobs"`` scores each completion after its prompt followed by ``hints[i]``
      (token ids of the reference-answer hint), with the adapter on;
    * ``"text_offsets"`` only decodes with the tokenizer.

    Memory: one chunk's [chunk, C, V] distributions (twice with the Hellinger distance).
    """
    needs = set(needs)
    texts = [text_offsets(team_model.tokenizer, m.completion_ids) for m in messages] \
        if "text_offsets" in needs else [(None, None)] * len(messages)
    teacher: list[np.ndarray | None] = [None] * len(messages)
    if "teacher_logprobs" in needs:
        if hints is None or len(hints) != len(messages):
            raise ValueError("teacher_logprobs need one hint (token ids) per message")
        teacher = _teacher_logprobs(team_model, messages, hints, temperature, chunk)
    out = [TokenStats(logprobs=np.asarray(m.logprobs, dtype=np.float64), text=t, token_ends=e,
                      teacher_logprobs=teacher[i],
                      entropies=(np.asarray(m.entropies, dtype=np.float64)
                                 if "entropies" in needs and m.entropies else None))
           for i, (m, (t, e)) in enumerate(zip(messages, texts, strict=True))]
    scored = [i for i, m in enumerate(messages)
              if "hellinger" in needs or "ref_logprobs" in needs or ("entropies" in needs and not m.entropies)]
    if not scored:
        return out
    by_adapter: dict[str, list[int]] = defaultdict(list)
    for i in scored:
        if not messages[i].completion_ids:
            raise ValueError(f"message {i} has no completion tokens; token statistics need some")
        by_adapter[messages[i].adapter].append(i)
    with torch.no_grad():
        for adapter, idx in sorted(by_adapter.items()):
            for k in range(0, len(idx), chunk):
                part = idx[k:k + chunk]
                for row, fields in zip(part, _score_chunk(team_model, [messages[i] for i in part], adapter,
                                                          needs, temperature), strict=True):
                    out[row] = dataclasses.replace(out[row], **fields)
    return out


def _score_chunk(team_model, part: Sequence[Message], adapter: str, needs: set[str],
                 temperature: float) -> list[dict[str, np.ndarray]]:
    """The model statistics of one chunk of messages of one adapter, as TokenStats fields per message:
    a policy pass when the Hellinger distance or a missing entropy needs it, a reference pass
    (adapters disabled) for ``ref_logprobs`` / ``hellinger``."""
    prompts = [list(m.prompt_ids) for m in part]
    completions = [list(m.completion_ids) for m in part]
    lp = lq = targets = None
    if "hellinger" in needs or ("entropies" in needs and not all(m.entropies for m in part)):
        lp, targets, _ = team_model.completion_logprobs(prompts, completions, adapter=adapter,
                                                        temperature=temperature, return_distributions=True)
    if needs & {"ref_logprobs", "hellinger"}:
        lq, targets, _ = team_model.reference_logprobs(prompts, completions, adapter, temperature=temperature,
                                                       return_distributions=True)
    return stats_from_distributions(lp, lq, targets, [len(m.completion_ids) for m in part], needs,
                                    recorded=[bool(m.entropies) for m in part])


def stats_from_distributions(lp: torch.Tensor | None, lq: torch.Tensor | None, targets: torch.Tensor,
                             lengths: Sequence[int], needs: Collection[str],
                             recorded: Sequence[bool] | None = None) -> list[dict[str, np.ndarray]]:
    """TokenStats fields of each of b completions (``lengths`` tokens each) from the next-token
    log-distributions of the policy ``lp`` and of the reference ``lq`` (each [b, C, V] or ``None``, no
    grad) and the completion tokens ``targets`` [b, C]: ``current_logprobs`` and the entropies of the
    rows that did not record theirs (``recorded[row]`` False; all when ``None``) from ``lp``,
    ``ref_logprobs`` from ``lq``, ``hellinger`` from both. Used by the statistics pass and by the
    update, which computes the same numbers from its own forward pass."""
    fields: list[dict[str, np.ndarray]] = [{} for _ in lengths]
    recorded = recorded if recorded is not None else [False] * len(lengths)

    def put(name: str, values: torch.Tensor, rows: Sequence[int]) -> None:  # values [b, C]
        for row in rows:
            fields[row][name] = values[row, :lengths[row]].double().cpu().numpy()

    everyone = range(len(lengths))
    if lp is not None:
        put("current_logprobs", lp.gather(-1, targets[..., None]).squeeze(-1), everyone)
        if "entropies" in needs:
            unrecorded = [r for r in everyone if not recorded[r]]
            if unrecorded:
                put("entropies", -torch.linalg.vecdot(lp.exp(), lp), unrecorded)  # -sum_v p log p
    if lq is not None and "ref_logprobs" in needs:
        put("ref_logprobs", lq.gather(-1, targets[..., None]).squeeze(-1), everyone)
    if "hellinger" in needs:
        if lp is None or lq is None:
            raise ValueError("the Hellinger distance needs the policy's and the reference's distributions")
        # H^2 = 1 - sum sqrt(p q) = 1/2 sum (sqrt p - sqrt q)^2: the second form is exactly 0 for
        # equal distributions (the first leaves sqrt(rounding) ~ 3e-4). The [b, C, V] temporaries
        # are reused in place and the norm fuses square and sum: these are the largest arrays of a step.
        root_p = lp.mul(0.5).exp_()
        h = torch.linalg.vector_norm(root_p.sub_(lq.mul(0.5).exp_()), dim=-1) * 0.5 ** 0.5  # [b, C]
        put("hellinger", h.clamp(max=1.0), everyone)
    return fields


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
                    [list(messages[i].completion_ids) for i in part], adapter=adapter, temperature=temperature,
                    share_prompts=True)
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

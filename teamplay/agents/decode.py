"""teamplay's own decoding loop: greedy or inverse-CDF sampling, rows that finished leave the batch,
identical prompts run once.

``generate`` keeps every row of a batch until the last one stops: a proposal that stopped after 10
tokens is still run, as padding, for as long as the longest reply of its micro-batch (on the demo's
prompts about a quarter of a lock-step call's rows x steps). ``decode`` runs the same forward passes
(prefill with the attention mask and positions of left-padded rows, then one token per step through
the key/value cache) and drops finished rows from the batch and from the cache once they are an
eighth of it, so each later step computes only the rows still writing.

What a row sees does not change: its positions follow its own tokens, its attention mask covers its
own prompt and completion, its scores are processed by the same logits processors (temperature,
top-k, top-p: stateless warpers, ``sampling_processors``). Greedy decoding takes the argmax and records
the log-prob of the T=1 distribution; sampled decoding draws by inverse CDF (``inverse_cdf_tokens``)
from one generator per row, or one for the call, and records the log-prob of the distribution
sampled. Tested: greedy transcripts equal ``generate``'s and one-at-a-time decoding's in float32.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

#: drop finished rows from the batch once they are at least this share of it (a drop copies the
#: cache of the rows kept, about one step's worth of concatenation)
COMPACT_SHARE = 0.125


def inverse_cdf_tokens(log_dist: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """The tokens [B] drawn from ``log_dist`` [B, V] (log-probabilities; -inf where a warper removed
    a token) by the uniforms [B] in [0, 1): for each row the first token whose cumulative probability
    exceeds u times the row's total.

    One softmax-sized pass and a cumulative sum, where ``torch.multinomial`` draws an exponential
    variate for every vocabulary token (on a CPU 16-40 ms a step at batch 16-32 over 49k tokens). A
    token of probability 0 is never drawn (its cumulative sum equals its predecessor's and the search
    takes the first sum above u); a float32 cumulative sum cannot draw a token whose probability is
    below its resolution near 1 (about 6e-8).
    """
    cumulative = log_dist.exp().cumsum_(dim=-1)  # [B, V]
    u = uniforms.to(cumulative.dtype) * cumulative[:, -1]  # [B]
    return torch.searchsorted(cumulative, u[:, None], right=True).clamp_(max=log_dist.shape[-1] - 1)[:, 0]


@dataclass
class Streams:
    """Where sampled rows' uniforms come from: one generator per row (``per_row``, indexed by the
    row's place in the call), else ``shared`` (None: the global torch generator)."""

    shared: torch.Generator | None = None
    per_row: Sequence[torch.Generator] | None = None

    def uniforms(self, rows: torch.Tensor, device: torch.device) -> torch.Tensor:
        """[len(rows)] uniforms for the active rows (``rows``: their places in the call)."""
        if self.per_row is not None:
            return torch.stack([torch.rand((), generator=self.per_row[int(r)], device=device) for r in rows])
        return torch.rand(len(rows), generator=self.shared, device=device)


@dataclass
class Decoded:
    """Per row of the call (in call order): completion token ids (up to and including the first stop
    token), their log-probs and, when asked for, the entropies of the distribution each was drawn from."""

    ids: list[list[int]]
    logprobs: list[list[float]]
    entropies: list[list[float]] = field(default_factory=list)


@torch.no_grad()
def decode(model: torch.nn.Module, cache_keyword: str, cache: object, input_ids: torch.Tensor,
           attention: torch.Tensor, *, processors: Sequence, streams: Streams | None, max_new_tokens: int,
           stop_ids: Sequence[int], pad_id: int, entropies: bool = False,
           owner: torch.Tensor | None = None) -> Decoded:
    """Decode every row of ``input_ids`` [B, T] (the part of the prompts not in ``cache`` yet) after
    the C tokens ``cache`` holds; ``attention`` [B, C + T] masks the padding of cached and new parts.

    ``streams`` None decodes greedily; otherwise each token is drawn from the processed scores.
    ``processors`` must be stateless warpers (they see a placeholder for ``input_ids``).
    ``owner`` [R]: the rows of ``input_ids``, ``attention`` and ``cache`` are distinct prompts, and
    the call decodes R rows, row r continuing prompt ``owner[r]`` (a group's samples of one question):
    each distinct prompt runs once, then its cache and first scores are copied to its rows.
    """
    device = input_ids.device
    rows = input_ids.shape[0] if owner is None else len(owner)
    # per step: (places in the call, tokens, log-probs, entropies or None) of the rows writing, [w] each
    record: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]] = []
    active = torch.arange(rows, device=device)  # [b]: places in the call of the rows still in the batch
    stops = torch.tensor(list(stop_ids), device=device)
    positions = (attention.cumsum(-1) - 1).clamp(min=0)[:, attention.shape[1] - input_ids.shape[1]:]  # [B, T]
    next_position = attention.sum(-1, keepdim=True)  # [B, 1]: the position of each row's next token
    step_ids = input_ids
    finished = torch.zeros(rows, dtype=torch.bool, device=device)  # [b]
    for _ in range(max_new_tokens):
        out = model(input_ids=step_ids, attention_mask=attention, position_ids=positions, use_cache=True,
                    logits_to_keep=1, **{cache_keyword: cache})
        logits = out.logits[:, -1]  # [b, V]
        if owner is not None:  # the distinct prompts ran: each row continues its own from here
            owner = owner.to(device)
            cache.reorder_cache(owner)
            logits, attention, next_position, step_ids = (
                logits[owner], attention[owner], next_position[owner], step_ids[owner])
            owner = None
        scores = logits.float()  # [b, V]
        for warp in processors:
            scores = warp(step_ids, scores)
        log_dist = torch.log_softmax(scores, dim=-1)  # [b, V]
        if streams is None:
            tokens = log_dist.argmax(-1)  # [b]
        else:
            tokens = inverse_cdf_tokens(log_dist, streams.uniforms(active, device))
        token_logps = log_dist.gather(-1, tokens[:, None])[:, 0]  # [b]
        token_ents = (-torch.where(log_dist.isfinite(), log_dist.exp() * log_dist, 0.0).sum(-1)
                      if entropies else None)  # [b]: tokens removed by top-k / top-p add nothing
        writing = ~finished  # [b]: rows whose token this is (finished rows not dropped yet are padding)
        record.append((active[writing], tokens[writing], token_logps[writing],
                       None if token_ents is None else token_ents[writing]))
        finished |= torch.isin(tokens, stops)
        if bool(finished.all()):
            break
        tokens = torch.where(finished, torch.full_like(tokens, pad_id), tokens)
        attention = torch.cat([attention, torch.ones_like(attention[:, :1])], dim=1)  # [b, L + 1]
        positions = next_position
        next_position = next_position + 1
        step_ids = tokens[:, None]  # [b, 1]
        if int(finished.sum()) >= max(1, COMPACT_SHARE * len(active)):  # finished rows leave the batch
            keep = (~finished).nonzero()[:, 0]  # [b']
            cache.batch_select_indices(keep)
            active, attention, positions = active[keep], attention[keep], positions[keep]
            next_position, step_ids, finished = next_position[keep], step_ids[keep], finished[keep]
    out_ids: list[list[int]] = [[] for _ in range(rows)]
    out_logps: list[list[float]] = [[] for _ in range(rows)]
    out_ents: list[list[float]] = [[] for _ in range(rows)]
    for places, tokens, token_logps, token_ents in record:
        ents = token_ents.tolist() if token_ents is not None else None
        for k, (row, token, logp) in enumerate(zip(places.tolist(), tokens.tolist(), token_logps.tolist(),
                                                   strict=True)):
            out_ids[row].append(token)
            out_logps[row].append(logp)
            if ents is not None:
                out_ents[row].append(ents[k])
    return Decoded(ids=out_ids, logprobs=out_logps, entropies=out_ents if entropies else [])

"""From credited episodes to policy-gradient samples, one per generated message.

A ``PolicySample`` is what the loss needs of one message: which adapter wrote it, its prompt and
completion tokens, the behaviour log-probs recorded at generation, and its advantage (broadcast
to every completion token by the GRPO loss; used as the sequence advantage by GSPO).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np

from teamplay.records import Episode


@dataclass(frozen=True)
class PolicySample:
    """One generated message with its advantage.

    Fields:
        adapter: LoRA adapter that generated the message (and will be updated by it).
        role: role of the author (for per-role metrics).
        prompt_ids: prompt tokens, shape [P].
        completion_ids: generated tokens, shape [C], C >= 1.
        old_logprobs: behaviour log-probs, shape [C].
        advantage: the message's advantage (a scalar).
        group_id: the credit group the episode belongs to.
        token_advantages: one advantage per completion token, shape [C], when a token-level
            credit method redistributed ``advantage`` over the tokens; ``None`` = ``advantage`` on
            every token (the scalar path, unchanged and as fast as before).
    """

    adapter: str
    role: str
    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    old_logprobs: tuple[float, ...]
    advantage: float
    group_id: str
    token_advantages: tuple[float, ...] | None = None


def build_samples(episodes: Sequence[Episode], advantages: Sequence[np.ndarray],
                  trainable_adapters: Collection[str],
                  token_advantages: Sequence[Sequence[np.ndarray | None]] | None = None) -> list[PolicySample]:
    """Samples for every generated message whose adapter is being trained.

    Skipped turns and scripted text (no completion tokens) and messages of frozen adapters are
    left out: they have nothing a gradient could change. ``token_advantages[g][t]`` (optional) is
    message t's per-token advantages [C] or ``None`` (the scalar on every token).
    """
    if len(episodes) != len(advantages):
        raise ValueError(f"{len(episodes)} episodes but {len(advantages)} advantage arrays")
    if token_advantages is not None and len(token_advantages) != len(episodes):
        raise ValueError(f"{len(episodes)} episodes but {len(token_advantages)} token advantage lists")
    samples = []
    for g, (ep, adv) in enumerate(zip(episodes, advantages, strict=True)):
        if len(adv) != len(ep.messages):
            raise ValueError(f"episode {ep.problem_id}: {len(ep.messages)} messages, {len(adv)} advantages")
        for t, (msg, a) in enumerate(zip(ep.messages, adv, strict=True)):
            if not msg.spoke or not msg.completion_ids or msg.adapter not in trainable_adapters:
                continue
            tokens = None if token_advantages is None else token_advantages[g][t]
            if tokens is not None and len(tokens) != len(msg.completion_ids):
                raise ValueError(f"episode {ep.problem_id}, message {t}: {len(msg.completion_ids)} tokens "
                                 f"but {len(tokens)} token advantages")
            samples.append(PolicySample(
                adapter=msg.adapter, role=msg.role, prompt_ids=msg.prompt_ids,
                completion_ids=msg.completion_ids, old_logprobs=msg.logprobs, advantage=float(a),
                group_id=ep.group_id,
                token_advantages=None if tokens is None else tuple(float(x) for x in tokens)))
    return samples

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
    """

    adapter: str
    role: str
    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    old_logprobs: tuple[float, ...]
    advantage: float
    group_id: str


def build_samples(episodes: Sequence[Episode], advantages: Sequence[np.ndarray],
                  trainable_adapters: Collection[str]) -> list[PolicySample]:
    """Samples for every generated message whose adapter is being trained.

    Skipped turns and scripted text (no completion tokens) and messages of frozen adapters are
    left out: they have nothing a gradient could change.
    """
    if len(episodes) != len(advantages):
        raise ValueError(f"{len(episodes)} episodes but {len(advantages)} advantage arrays")
    samples = []
    for ep, adv in zip(episodes, advantages, strict=True):
        if len(adv) != len(ep.messages):
            raise ValueError(f"episode {ep.problem_id}: {len(ep.messages)} messages, {len(adv)} advantages")
        for msg, a in zip(ep.messages, adv, strict=True):
            if not msg.spoke or not msg.completion_ids or msg.adapter not in trainable_adapters:
                continue
            samples.append(PolicySample(
                adapter=msg.adapter, role=msg.role, prompt_ids=msg.prompt_ids,
                completion_ids=msg.completion_ids, old_logprobs=msg.logprobs, advantage=float(a),
                group_id=ep.group_id))
    return samples

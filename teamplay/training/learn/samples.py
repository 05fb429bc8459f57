"""From credited episodes to policy-gradient samples, one per generated message.

A ``PolicySample`` is what the loss needs of one message: which adapter wrote it, its prompt and
completion tokens, the behaviour log-probs recorded at generation, and its advantage (broadcast
to every completion token by the GRPO loss; used as the sequence advantage by GSPO), or its token
advantages, given (``token_advantages``) or to be computed by the update from its own forward
pass (``token_rule``).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel

from teamplay.records import Episode, Message


@dataclass(frozen=True)
class TokenRule:
    """A per-message token method (one with a ``row`` rule) the update applies to a sample from the
    statistics of its own forward pass: ``method`` is the registered name, ``options`` its parsed
    options. Picklable (it names the method rather than holding the function)."""

    method: str
    options: BaseModel


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
        token_rule: the token method the update applies to this message (then
            ``token_advantages`` is ``None`` until the update has computed them).
    """

    adapter: str
    role: str
    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    old_logprobs: tuple[float, ...]
    advantage: float
    group_id: str
    token_advantages: tuple[float, ...] | None = None
    token_rule: TokenRule | None = None


def trains(message: Message, trainable_adapters: Collection[str]) -> bool:
    """Whether a message becomes a sample: spoken, with tokens, by an adapter being trained."""
    return message.spoke and bool(message.completion_ids) and message.adapter in trainable_adapters


def sample_positions(episodes: Sequence[Episode], trainable_adapters: Collection[str]) -> list[tuple[int, int]]:
    """``(episode g, message t)`` of each sample :func:`build_samples` makes, in its order."""
    return [(g, t) for g, ep in enumerate(episodes) for t, msg in enumerate(ep.messages)
            if trains(msg, trainable_adapters)]


def build_samples(episodes: Sequence[Episode], advantages: Sequence[np.ndarray],
                  trainable_adapters: Collection[str],
                  token_advantages: Sequence[Sequence[np.ndarray | None]] | None = None,
                  token_rule: TokenRule | None = None, rule_roles: Collection[str] | None = None
                  ) -> list[PolicySample]:
    """Samples for every generated message whose adapter is being trained.

    Skipped turns and scripted text (no completion tokens) and messages of frozen adapters are
    left out: they have nothing a gradient could change. ``token_advantages[g][t]`` (optional) is
    message t's per-token advantages [C] or ``None`` (the scalar on every token); ``token_rule``
    (optional, exclusive with it) goes to the samples of ``rule_roles`` (all roles when ``None``).
    """
    if token_rule is not None and token_advantages is not None:
        raise ValueError("token advantages are either given or left to a token rule, not both")
    if len(episodes) != len(advantages):
        raise ValueError(f"{len(episodes)} episodes but {len(advantages)} advantage arrays")
    if token_advantages is not None and len(token_advantages) != len(episodes):
        raise ValueError(f"{len(episodes)} episodes but {len(token_advantages)} token advantage lists")
    samples = []
    for g, (ep, adv) in enumerate(zip(episodes, advantages, strict=True)):
        if len(adv) != len(ep.messages):
            raise ValueError(f"episode {ep.problem_id}: {len(ep.messages)} messages, {len(adv)} advantages")
        for t, (msg, a) in enumerate(zip(ep.messages, adv, strict=True)):
            if not trains(msg, trainable_adapters):
                continue
            tokens = None if token_advantages is None else token_advantages[g][t]
            if tokens is not None and len(tokens) != len(msg.completion_ids):
                raise ValueError(f"episode {ep.problem_id}, message {t}: {len(msg.completion_ids)} tokens "
                                 f"but {len(tokens)} token advantages")
            samples.append(PolicySample(
                adapter=msg.adapter, role=msg.role, prompt_ids=msg.prompt_ids,
                completion_ids=msg.completion_ids, old_logprobs=msg.logprobs, advantage=float(a),
                group_id=ep.group_id,
                token_advantages=None if tokens is None else tuple(float(x) for x in tokens),
                token_rule=token_rule if rule_roles is None or msg.role in rule_roles else None))
    return samples

"""A training step's metrics (the line ``Trainer.step`` logs to metrics.jsonl), from its episodes,
its groups and what the update reported."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Sequence
from typing import Any

import numpy as np

from teamplay.records import Episode
from teamplay.training.learn.samples import PolicySample
from teamplay.training.step.stages import GroupWork, all_credited, all_samples


def step_metrics(episodes: Sequence[Episode], groups: Sequence[GroupWork], work: Sequence[GroupWork],
                 active: Collection[str], update: dict[str, Any],
                 replay: dict[str, Any] | None = None) -> dict[str, Any]:
    """The step's metrics (JSON-ready): rewards over all ``episodes``, group counts over all
    ``groups``, credit over the credited ``work``, the ``update``'s metrics (the update stage's:
    ``lr`` among them, the learning rate the update used) and the credit stage's statistics
    (``replay``: the replay engine's and the generative judge's, when the method uses them)."""
    rewards = [ep.reward for ep in episodes]
    samples = all_samples(work)
    credited = all_credited(work)
    return {
        "reward_mean": float(np.mean(rewards)),
        "reward_std": float(np.std(rewards)),
        "reward_min": float(np.min(rewards)),
        "reward_max": float(np.max(rewards)),
        "accuracy": float(np.mean([r > 0.5 for r in rewards])),
        "groups": len(groups),
        "zero_variance_groups": sum(not g.has_signal for g in groups),
        "samples": len(samples),
        "trained_adapters": sorted(active),
        **role_credit_metrics(credited),
        **advantage_range(credited),
        **token_credit_metrics(samples),
        **update,
        "tokens": sum(ep.tokens for ep in episodes),
        **(replay or {}),
    }


def role_credit_metrics(credited: Sequence[tuple[Episode, np.ndarray]]) -> dict[str, Any]:
    """Per-role mean advantage and credit share.

    credit share of a role = sum of |advantage| of its messages / sum over all messages: the part
    of the learning signal that role received this step.
    """
    total: dict[str, float] = defaultdict(float)
    absolute: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for ep, adv in credited:
        for msg, a in zip(ep.messages, adv, strict=True):
            total[msg.role] += float(a)
            absolute[msg.role] += abs(float(a))
            count[msg.role] += 1
    norm = sum(absolute.values())
    return {
        "adv_mean": {r: total[r] / count[r] for r in count},
        "credit_share": {r: (absolute[r] / norm if norm > 0 else 0.0) for r in count},
    }


def advantage_range(credited: Sequence[tuple[Episode, np.ndarray]]) -> dict[str, float | None]:
    """``adv_min``/``adv_max``: the smallest and largest message advantage of the step's credited
    episodes (group scale included; ``None`` when no group was credited), so that credit which
    blows up shows in metrics.jsonl before it turns into a non-finite loss."""
    values = np.concatenate([np.asarray(adv, dtype=np.float64) for _, adv in credited] or [np.empty(0)])
    if not values.size:
        return {"adv_min": None, "adv_max": None}
    return {"adv_min": float(values.min()), "adv_max": float(values.max())}


def token_credit_metrics(samples: Sequence[PolicySample]) -> dict[str, Any]:
    """How much token credit moved: the number of messages with token advantages and the mean,
    over them, of the within-message std of the token advantages divided by |message advantage|
    (0 = uniform tokens, as message-level credit), and the range of the token advantages
    (``token_adv_min``/``token_adv_max``). Empty when no sample has token advantages."""
    spread = [float(np.std(s.token_advantages)) / abs(s.advantage)
              for s in samples if s.token_advantages is not None and s.advantage != 0]
    rows = [np.asarray(s.token_advantages, dtype=np.float64) for s in samples if s.token_advantages is not None]
    if not rows:
        return {}
    tokens = np.concatenate(rows)
    return {"token_credit_messages": len(rows), "token_adv_relative_spread": float(np.mean(spread)) if spread else 0.0,
            "token_adv_min": float(tokens.min()) if tokens.size else None,
            "token_adv_max": float(tokens.max()) if tokens.size else None}


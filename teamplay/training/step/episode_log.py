"""The lines a training step writes to episodes.jsonl: its first credited episodes with their
advantages, how they were valued and, under token-level credit, each token's advantage and text."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from teamplay.records import Episode
from teamplay.training.learn.token_stats import text_offsets
from teamplay.training.step.stages import TokenRows


def episode_lines(credited: Sequence[tuple[Episode, np.ndarray]], token_advantages: TokenRows | None, limit: int,
                  credit_record: Callable[[Episode], dict[str, Any]], team_model) -> list[dict[str, Any]]:
    """The first ``limit`` credited ``(episode, advantages [T])`` pairs as episodes.jsonl lines:
    the episode, its advantages, ``credit_record(episode)`` and, with ``token_advantages`` (aligned
    with ``credited``), the token advantages and token text pieces (``token_log``, with the team
    model's tokenizer: only then is one needed, a team of several bases has none)."""
    lines = []
    for i, (ep, adv) in enumerate(credited[:limit]):
        line = {**ep.to_dict(), "advantages": [float(a) for a in adv], "credit": credit_record(ep)}
        if token_advantages is not None:
            line.update(token_log(team_model.tokenizer, ep, token_advantages[i]))
        lines.append(line)
    return lines


def token_log(tokenizer, ep: Episode, rows: Sequence[np.ndarray | None]) -> dict[str, Any]:
    """Token advantages (6 decimals) and the text piece of each token, per message (``None`` for a
    message with one advantage on every token), for the report's token shading."""
    pieces: list[list[str] | None] = []
    for msg, row in zip(ep.messages, rows, strict=True):
        if row is None:
            pieces.append(None)
            continue
        _, ends = text_offsets(tokenizer, msg.completion_ids)
        text = tokenizer.decode(list(msg.completion_ids), skip_special_tokens=True)
        starts = np.concatenate([[0], ends[:-1]])
        pieces.append([text[a:b] for a, b in zip(starts, ends, strict=True)])
    return {"token_advantages": [None if r is None else [round(float(x), 6) for x in r] for r in rows],
            "token_pieces": pieces}

"""Scripted proposer/reviewer teams for the counterfactual-credit tests (no model, exact outcomes).

``CompliantProposer``: round 0 states the scripted first answer of episode i (i counts round-0
requests in job order, so the i-th job of a rollout is scripted episode i), tagged ``[e<i>]`` so a
reviewer can follow its script; later rounds keep the pending answer unless the last verdict was
WRONG, and then change it: to the reference if it was wrong, to a wrong number if it was right.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import numpy as np

from teamplay.agents.backends.base import GenerationBackend
from teamplay.agents.backends.scripted import format_answer, same_answer, wrong_answer
from teamplay.records import Generation, SamplingParams, TurnRequest

TAG = re.compile(r"\[e(\d+)\]")


def episode_tag(request: TurnRequest) -> int | None:
    """The scripted episode index from the first proposal in the visible transcript."""
    for m in request.transcript:
        if m.role == "proposer" and (found := TAG.search(m.text)):
            return int(found.group(1))
    return None


class TeamScript(GenerationBackend):
    """A backend answering proposer turns compliantly and reviewer turns with ``review(request, tag)``.

    ``first[i]`` is episode i's first answer (``None``: the reference, ``"wrong"``: a wrong one).
    Generations carry text only; every call is counted in ``calls``.
    """

    name = "scripted"

    def __init__(self, first: Sequence[str], review: Callable[[TurnRequest, int | None], str]) -> None:
        self.first = list(first)
        self.review = review
        self.count = 0
        self.calls = 0

    def generate(self, requests: Sequence[TurnRequest], sampling: SamplingParams) -> list[Generation]:
        self.calls += 1
        return [Generation(text=self._text(r), adapter=r.adapter) for r in requests]

    def _text(self, r: TurnRequest) -> str:
        item = r.item
        assert item is not None
        if r.stage == "review":
            return self.review(r, episode_tag(r))
        pending = r.metadata.get("pending_answer")
        if pending is None:  # the first proposal
            i = self.count
            self.count += 1
            kind = self.first[i % len(self.first)]
            answer = item.reference if kind == "right" else wrong_answer(item.reference)
            return f"[e{i % len(self.first)}] {format_answer(answer)}"
        if r.metadata.get("last_verdict") == "WRONG":
            right = same_answer(str(pending), item)
            return format_answer(wrong_answer(item.reference) if right else item.reference)
        return format_answer(str(pending))


class CatchingReviewer:
    """Says WRONG to a wrong pending answer with probability ``p`` (else RIGHT), RIGHT to a right
    one; draws from its own seeded generator, one draw per review."""

    def __init__(self, p: float, seed: int = 0) -> None:
        self.p = p
        self.rng = np.random.default_rng(seed)

    def __call__(self, r: TurnRequest, tag: int | None) -> str:
        pending = r.metadata.get("pending_answer")
        assert r.item is not None
        if pending is None or same_answer(str(pending), r.item):
            return "RIGHT"
        return "WRONG" if self.rng.random() < self.p else "RIGHT"

"""The generative judge of credit (``shapley`` with ``value: judge``) on a generation backend.

:class:`BackendJudge` is the trainer's ``judge`` credit resource (a
:class:`~teamplay.credit.values.generative_judge.GenerativeJudge`): each prompt becomes one user message
sent with adapter ``None`` (the base model with every adapter off, or a separate judge model's
backend), all prompts of a call in one ``generate``, greedy, so a judgement is repeatable. It counts
what it generates per training step (:class:`JudgeStats`), which the step's metrics report and the
token budget counts (``judge_tokens``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from teamplay.agents.backends.base import GenerationBackend
from teamplay.credit.values.generative_judge import JudgeReply
from teamplay.records import ChatMessage, SamplingParams, TaskItem, TurnRequest

#: the role name of judge requests (a team's scripted role of this name would answer them: avoid it)
JUDGE_ROLE = "credit_judge"


@dataclass
class JudgeStats:
    """What the judge spent in the current step.

    Fields:
        tokens: tokens generated (0 from a scripted backend, which writes text without tokens).
        prompts: prompts judged (one per coalition valued).
        calls: ``generate`` calls (one per batch of coalitions).
    """

    tokens: int = 0
    prompts: int = 0
    calls: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"judge_tokens": self.tokens, "judge_prompts": self.prompts, "judge_calls": self.calls}


class BackendJudge:
    """Greedy judge replies from ``backend``, adapter ``None``, one ``generate`` call per batch.

    Args:
        backend: the run's backend (the team's base model, adapters off) or a judge model's.
    """

    def __init__(self, backend: GenerationBackend) -> None:
        self.backend = backend
        self.stats = JudgeStats()

    def begin_step(self) -> None:
        """Start counting a new step."""
        self.stats = JudgeStats()

    def generate(self, prompts: Sequence[str], max_new_tokens: int,
                 item: TaskItem | None = None) -> list[JudgeReply]:
        """One reply per prompt, in order; ``item`` rides along for scripted backends only."""
        if not prompts:
            return []
        requests = [TurnRequest(agent="judge", role=JUDGE_ROLE, stage="judge", round=0,
                                chat=(ChatMessage("user", p),), adapter=None, item=item) for p in prompts]
        generations = self.backend.generate(requests, SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0))
        replies = [JudgeReply(g.text, len(g.completion_ids)) for g in generations]
        self.stats.calls += 1
        self.stats.prompts += len(prompts)
        self.stats.tokens += sum(r.tokens for r in replies)
        return replies

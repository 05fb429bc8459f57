"""``review``: review that can pay. A proposer answers once; a reviewer gives a verdict and, when it
judges the proposal WRONG, a corrected answer that becomes the team's.

Round 0: the proposer solves the problem. Round 1: the reviewer sees the problem and the proposal
and replies with its verdict on the first line (RIGHT or WRONG, as ``parse_verdict`` reads it; the
``verdict_prefix`` option, default ``"Verdict:"``, starts every review reply so that a small model's
next word is the verdict) and, after WRONG, its corrected answer in the task's answer format (the
task's extractor reads the answer of the whole reply, as for every message).

What the reviewer's reply does (``teamplay.envs.protocols.verdicts.review_outcome``;
``Episode.metadata["review"]["outcome"]``):

* ``kept``: verdict RIGHT: the proposal is the team's answer (an answer the reviewer restates is
  not needed and not read);
* ``adopted``: verdict WRONG with an answer: the reviewer's answer is the team's;
* ``no_verdict`` (no RIGHT/WRONG on the first line) or ``no_answer`` (WRONG without an answer): a
  malformed review; the proposal stands, and the outcome counts it.

So the team's answer is the proposal unless the outcome is ``adopted``. Team reward: the task's score
of that answer. Per-agent scores (``Episode.agent_correct``): the proposer's is its proposal's score
``c_prop``; the reviewer's is the team reward ``R`` (the score of the answer its review decided).

The setting the issue asks for is a proposer whose error rate is known: the scripted
``noisy_proposer(p_right=0.6)`` is right with probability 0.6 and otherwise off by one (its coin is
per request, seeded; ``noisy_proposer(p_right=0.6, spread=3)``: off by a nonzero amount up to 3
either way, so a reviewer cannot fix it by undoing one known offset), with an LLM reviewer::

    protocol: {name: review}
    team:
      roles:
        - {name: proposer, policy: "scripted:noisy_proposer(p_right=0.6)"}
        - {name: reviewer}

and the same with both roles trained: ``roles: [{name: proposer}, {name: reviewer}]``. The
``oracle`` credit's ``review`` form gives the closed-form credit of both (``teamplay.credit.methods.oracle``).

The default instruction spells out both reply forms, because an instruction that asks only for
the verdict's line gets few verdicts from a small model; what the untrained embedded model writes
under each is measured in docs/results/index.md#review-replies.

Masking (``score_visible``): with the reviewer's message withheld the proposal stands; with the
proposal withheld the reviewer's answer counts only if its review adopted it (a kept or malformed
review of nothing is no answer).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import Field, field_validator

from teamplay.agents.roles import Team
from teamplay.envs.protocols.base import (
    Protocol,
    ProtocolOptions,
    ProtocolState,
    ReplyPrefix,
    RoleSpec,
    TurnSpec,
    instruction_option,
)
from teamplay.envs.protocols.registry import register_protocol
from teamplay.envs.protocols.verdicts import VerdictPrefix, parse_verdict, review_outcome
from teamplay.envs.tasks.base import Task
from teamplay.records import Message, TaskItem

PROPOSER_PROMPT = "You are the proposer in a team. Solve the problem step by step and state the final answer."
REVIEWER_PROMPT = ("You are the reviewer in a team. Check the proposed answer. First line: RIGHT or WRONG. If "
                   "WRONG, give the correct final answer; the team uses it.")
PROPOSE_INSTRUCTION = "Solve the problem. Reason step by step, then give the final answer."
#: the reply's two forms spelt out: SmolLM2-135M-Instruct, untrained, names a verdict in 28 of 40 arith
#: reviews at T = 1 with this instruction against 6 of 40 with "First line: RIGHT or WRONG"
#: (docs/results/index.md#review-replies)
REVIEW_INSTRUCTION = ("Proposed answer: {answer}. Check it. If it is right, reply: Verdict: RIGHT. If it is wrong, "
                      "reply: Verdict: WRONG. The answer is <the correct answer>.")

class ReviewOptions(ProtocolOptions):
    verdict_prefix: VerdictPrefix = Field("Verdict:", description=(
        "Text every review reply starts with, put after the assistant generation prompt so that the "
        "model's next word is the verdict ('': none). Must not read as a verdict itself."))
    proposal_prefix: ReplyPrefix = Field("", description=(
        "Text every proposal reply starts with, e.g. 'The answer is' ('': none)."))
    propose_instruction: str | None = instruction_option("The proposer's")
    review_instruction: str | None = instruction_option(
        "The reviewer's ({answer}: the proposal's answer, filled in)")

    @field_validator("review_instruction")
    @classmethod
    def _only_answer_field(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                value.format(answer="")
            except (KeyError, IndexError, ValueError) as exc:
                raise ValueError(f"{value!r}: the only field is {{answer}} (write {{{{ and }}}} for literal "
                                 f"braces); {type(exc).__name__}: {exc}") from None
        return value


def team_answer(proposal: Message | None, review: Message | None) -> str | None:
    """The team's answer: the reviewer's when its review adopted one, else the proposal's."""
    if review is not None and review_outcome(review) == "adopted":
        return review.answer
    return proposal.answer if proposal is not None and proposal.spoke else None


@register_protocol
class Review(Protocol):
    """One proposal, one review whose corrected answer the team adopts (module docstring)."""

    name = "review"
    traits = frozenset({"adopting_review", "chain", "verdicts"})
    Options = ReviewOptions
    verdict_stages = frozenset({"review"})
    roles = (RoleSpec("proposer", PROPOSER_PROMPT, count=1, max_count=1),
             RoleSpec("reviewer", REVIEWER_PROMPT, count=1, max_count=1))
    answer_roles = ("proposer", "reviewer")

    def schedule(self, team: Team) -> tuple[TurnSpec, ...]:
        return (TurnSpec("proposer_0", "proposer", "propose", 0), TurnSpec("reviewer_0", "reviewer", "review", 1))

    def instruction(self, state: ProtocolState, turn: TurnSpec) -> str:
        if turn.stage == "propose":
            return self.options.propose_instruction or PROPOSE_INSTRUCTION
        template = self.options.review_instruction or REVIEW_INSTRUCTION
        return template.format(answer=_shown(_proposal(state.messages)))

    def reply_prefix(self, state: ProtocolState, turn: TurnSpec) -> str:
        return self.options.verdict_prefix if turn.stage == "review" else self.options.proposal_prefix

    def turn_metadata(self, state: ProtocolState, turn: TurnSpec) -> Mapping[str, Any]:
        if turn.stage != "review":
            return {}
        proposal = _proposal(state.messages)
        return {"pending_answer": proposal.answer if proposal is not None else None,
                "pending_agent": "proposer_0"}

    def final_answer(self, state: ProtocolState) -> str | None:
        return team_answer(_proposal(state.messages), _review(state.messages))

    def outcome(self, state: ProtocolState, task: Task, final: str | None,
                answers: Mapping[str, str | None]) -> tuple[float, dict[str, float]]:
        proposal = _proposal(state.messages)
        reward = float(task.score_answer(final, state.item))
        c_prop = float(task.score_answer(proposal.answer if proposal is not None else None, state.item))
        return reward, {"proposer_0": c_prop, "reviewer_0": reward}

    def score_visible(self, task: Task, item: TaskItem, messages: Sequence[Message],
                      withheld: Sequence[bool]) -> float:
        kept = [m for m, hidden in zip(messages, withheld, strict=True) if not hidden]
        return float(task.score_answer(team_answer(_proposal(kept), _review(kept)), item))

    def episode_metadata(self, state: ProtocolState) -> dict[str, Any]:
        proposal, review = _proposal(state.messages), _review(state.messages)
        return {"review": {"proposal": proposal.answer if proposal is not None else None,
                           "verdict": parse_verdict(review.text) if review is not None else None,
                           "reviewer_answer": review.answer if review is not None else None,
                           "outcome": review_outcome(review)}}


def _proposal(messages: Sequence[Message]) -> Message | None:
    return next((m for m in messages if m.stage == "propose" and m.spoke), None)


def _review(messages: Sequence[Message]) -> Message | None:
    return next((m for m in messages if m.stage == "review"), None)


def _shown(proposal: Message | None) -> str:
    return proposal.answer if proposal is not None and proposal.answer is not None else "no final answer found"

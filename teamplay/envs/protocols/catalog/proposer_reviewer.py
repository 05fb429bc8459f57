"""``proposer_reviewer``: TRACER's dialogue (docs/credit/specification.md#tracer-dialogue).

Rounds ``0..R-1`` alternate: even rounds are proposal rounds, odd rounds review rounds. Round ``k``
is played by agent index ``k mod N`` of its role (round-robin over bundles; with equal proposer and
reviewer counts this is exactly §2.1's ``(k-1) mod N`` over 1-based rounds, so with N=2 bundles the
first bundle only proposes and the second only reviews, as in TRACER).

State: the *pending* proposal (its message, answer and author), a vote score (+1 per RIGHT, -1 per
WRONG review since the pending proposal was set) and the latest parsed verdict.

* A proposal with an answer replaces the pending one (a *refresh*; the vote score resets to 0). A
  proposal without a parsable answer, or a skipped proposal turn, *keeps* the pending answer (the
  first proposal is always taken, answer or not, so that reviewers have something to review).
* A review's verdict is its first non-empty line: RIGHT/CORRECT or WRONG/INCORRECT (case-insensitive,
  markdown such as ``**`` ignored; ``teamplay.envs.protocols.verdicts.parse_verdict``); anything
  else is no verdict. Reviews never change the pending
  answer; the proposal instruction after a WRONG verdict asks the proposer to revise.
* ``verdict_prefix`` (default ``""``: none): text every review reply starts with, e.g.
  ``"Verdict:"``. Model backends put it after the assistant generation prompt, so the model
  continues a reply that already reads "Verdict:" and its next word is the verdict; the message
  text keeps the prefix (the parser accepts "Verdict: RIGHT"). A small untrained model rarely opens
  a reply with RIGHT/WRONG on its own (SmolLM2-135M at T=1: 0 of 20 reviews), so nothing about the
  verdict can be learned; with the prefix it names one in about a third of its reviews. The prefix
  must not itself read as a verdict, and ``prefix + " RIGHT"`` / ``" WRONG"`` must parse as one.
* ``proposal_prefix`` (default ``""``): the same for proposal replies, e.g. ``"The answer is"``: the
  model's next words are its answer (a short, direct proposal; the answer parser reads the text
  with the prefix).
* ``instructions`` (default: none replaced): the turn instructions, by key (``INSTRUCTIONS``: solve,
  review, revise_wrong, revise_right, recheck), e.g. shorter ones for a small model or a CPU, where
  prompt tokens are most of a turn's cost. ``{answer}`` (the pending answer) and ``{author}`` (its
  proposer) are filled in; any other field, or an unknown key, is refused at config load.
* Final answer: the pending answer after the last round. Initial answer: the first proposal's.
* Skippable (speak/skip controller): a proposal turn once a pending answer exists (skip = keep), a
  review turn once a pending proposal exists (skip = stay silent). Round 0 always speaks.
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from pydantic import Field, field_validator

from teamplay.agents.roles import Team
from teamplay.envs.protocols.base import (
    Protocol,
    ProtocolState,
    ReplyPrefix,
    RoleSpec,
    SkippableOptions,
    TurnSpec,
)
from teamplay.envs.protocols.registry import register_protocol
from teamplay.envs.protocols.verdicts import VerdictPrefix, parse_verdict
from teamplay.records import Message, TaskItem

PROPOSER_PROMPT = ("You are the proposer in a problem-solving team. Solve the problem step by step. "
                   "When a reviewer says your answer is wrong, find the mistake and fix it.")
REVIEWER_PROMPT = ("You are the reviewer in a problem-solving team. Check the proposed solution step "
                   "by step. The first line of your reply must be exactly RIGHT or WRONG.")

#: the turn instructions (``instructions`` replaces any of them): key -> template with {answer} / {author}
INSTRUCTIONS = MappingProxyType({
    "solve": "Solve the problem. Reason step by step, then give the final answer.",
    "review": ("Review the current proposal by {author} (its answer: {answer}). Check every step. "
               "First line: RIGHT or WRONG. Then explain briefly; if WRONG, give the correct answer."),
    "revise_wrong": ("A reviewer judged the current answer ({answer}) WRONG. Find the mistake and "
                     "write a corrected solution with the final answer."),
    "revise_right": ("A reviewer judged the current answer ({answer}) RIGHT. Double-check it, then "
                     "restate the final answer or correct it."),
    "recheck": "Re-check the current answer ({answer}) step by step, then give the final answer.",
})
_FIELDS = frozenset({"answer", "author"})

class ProposerReviewerOptions(SkippableOptions):
    rounds: int = Field(5, ge=1, le=64, description="Rounds R (proposal and review rounds alternate, "
                                                    "starting with a proposal; TRACER's default 5).")
    n_agents: int | None = Field(None, ge=1, le=16, description="Bundles N (proposers and reviewers "
                                 "each). None: the team decides (default team: 1 of each).")
    history: int = Field(4, ge=0, le=64, description="Latest messages shown in the chat (TRACER shows "
                         "4); the pending proposal is always shown.")
    verdict_prefix: VerdictPrefix = Field("", description=(
        "Text every review reply starts with (e.g. 'Verdict:'): model backends put it after the "
        "assistant generation prompt, so the model's next word is the verdict. '': none."))
    proposal_prefix: ReplyPrefix = Field("", description=(
        "Text every proposal reply starts with (e.g. 'The answer is'), put after the assistant "
        "generation prompt like verdict_prefix. '': none."))
    instructions: dict[str, str] = Field(default_factory=dict, description=(
        "Turn instructions replacing the defaults, by key: solve, review, revise_wrong, revise_right, "
        "recheck; {answer} and {author} are filled in."))

    @field_validator("instructions")
    @classmethod
    def _known_templates(cls, value: dict[str, str]) -> dict[str, str]:
        unknown = sorted(set(value) - set(INSTRUCTIONS))
        if unknown:
            raise ValueError(f"unknown instruction key(s) {', '.join(unknown)}; keys: {', '.join(INSTRUCTIONS)}")
        for key, template in value.items():
            try:
                fields = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
            except ValueError as exc:
                raise ValueError(f"instructions.{key}: {exc} in {template!r} "
                                 f"(write {{{{ and }}}} for literal braces)") from None
            bad = sorted(fields - _FIELDS)
            if bad:
                raise ValueError(f"instructions.{key}: unknown field(s) {', '.join('{' + b + '}' for b in bad)} "
                                 f"in {template!r}; fields: {{answer}}, {{author}}")
            if not template.strip():
                raise ValueError(f"instructions.{key} is empty")
        return value


@dataclass
class ReviewState(ProtocolState):
    """``pending``: the proposal message holding the pending answer (None before round 0 ends)."""

    pending: Message | None = None
    vote_score: int = 0
    last_verdict: str | None = None
    verdicts: list[dict[str, Any]] = field(default_factory=list)
    proposals: list[dict[str, Any]] = field(default_factory=list)

    @property
    def pending_answer(self) -> str | None:
        return self.pending.answer if self.pending is not None else None


@register_protocol
class ProposerReviewer(Protocol):
    """TRACER: alternating proposal and review rounds; RIGHT/WRONG verdicts; keep or refresh."""

    name = "proposer_reviewer"
    traits = frozenset({"chain", "revises", "verdicts"})
    verdict_stages = frozenset({"review"})
    Options = ProposerReviewerOptions
    roles = (RoleSpec("proposer", PROPOSER_PROMPT), RoleSpec("reviewer", REVIEWER_PROMPT))
    skip_means = MappingProxyType({
        "propose": "keep: the pending answer stands (the first proposal skipped: no answer yet)",
        "review": "silence: no verdict, so the next proposal is not asked to revise"})
    answer_roles = ("proposer",)
    count_option_roles = ("proposer", "reviewer")

    def schedule(self, team: Team) -> tuple[TurnSpec, ...]:
        n_prop, n_rev = team.role("proposer").count, team.role("reviewer").count
        turns = []
        for k in range(self.options.rounds):
            if k % 2 == 0:
                turns.append(TurnSpec(f"proposer_{k % n_prop}", "proposer", "propose", k))
            else:
                turns.append(TurnSpec(f"reviewer_{k % n_rev}", "reviewer", "review", k))
        return tuple(turns)

    def new_state(self, item: TaskItem, team: Team, answer_instruction: str) -> ReviewState:
        return ReviewState(item=item, team=team, answer_instruction=answer_instruction)

    def visible(self, state: ProtocolState, turn: TurnSpec) -> list[Message]:
        assert isinstance(state, ReviewState)
        spoken = state.spoken()
        shown = spoken[len(spoken) - self.options.history:] if self.options.history else []
        if state.pending is not None and not any(m is state.pending for m in shown):
            shown = [state.pending, *shown]
        return shown

    def instruction(self, state: ProtocolState, turn: TurnSpec) -> str:
        assert isinstance(state, ReviewState)
        if turn.stage == "review":
            key = "review"
        elif state.pending is None:
            key = "solve"
        else:
            key = {"WRONG": "revise_wrong", "RIGHT": "revise_right"}.get(state.last_verdict or "", "recheck")
        template = self.options.instructions.get(key, INSTRUCTIONS[key])
        author = state.pending.agent if state.pending is not None else "nobody"
        return template.format(answer=_shown(state.pending_answer), author=author)

    def reply_prefix(self, state: ProtocolState, turn: TurnSpec) -> str:
        return {"review": self.options.verdict_prefix, "propose": self.options.proposal_prefix}.get(turn.stage, "")

    def turn_metadata(self, state: ProtocolState, turn: TurnSpec) -> Mapping[str, Any]:
        assert isinstance(state, ReviewState)
        meta = {"pending_answer": state.pending_answer,
                "pending_agent": state.pending.agent if state.pending is not None else None,
                "vote_score": state.vote_score}
        if turn.stage == "propose":
            meta["last_verdict"] = state.last_verdict
        return meta

    def may_skip(self, state: ProtocolState, turn: TurnSpec) -> bool:
        assert isinstance(state, ReviewState)
        if turn.stage == "propose":
            return state.pending_answer is not None
        return state.pending is not None

    def update(self, state: ProtocolState, message: Message) -> None:
        assert isinstance(state, ReviewState)
        if message.stage == "propose":
            refresh = message.spoke and (message.answer is not None or state.pending_answer is None)
            if refresh:
                state.pending, state.vote_score, state.last_verdict = message, 0, None
            action = "refresh" if refresh else ("keep" if message.spoke else "skip")
            state.proposals.append({"round": message.round, "agent": message.agent,
                                    "answer": message.answer, "action": action})
            return
        verdict = parse_verdict(message.text) if message.spoke else None
        state.verdicts.append({"round": message.round, "agent": message.agent, "verdict": verdict,
                               "spoke": message.spoke, "pending_answer": state.pending_answer,
                               "pending_agent": state.pending.agent if state.pending else None})
        if verdict is not None:
            state.vote_score += 1 if verdict == "RIGHT" else -1
            state.last_verdict = verdict

    def final_answer(self, state: ProtocolState) -> str | None:
        assert isinstance(state, ReviewState)
        return state.pending_answer

    def episode_metadata(self, state: ProtocolState) -> dict[str, Any]:
        assert isinstance(state, ReviewState)
        return {"verdicts": [dict(v) for v in state.verdicts],
                "proposals": [dict(p) for p in state.proposals], "vote_score": state.vote_score}


def _shown(answer: str | None) -> str:
    return answer if answer is not None else "no final answer found"

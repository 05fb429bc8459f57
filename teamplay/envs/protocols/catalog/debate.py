"""``debate``: multi-agent debate (Du et al., 2023).

Round 0: every debater answers alone. Rounds ``1..R``: every debater sees each debater's latest
message from the earlier rounds (the others' as user messages, its own as an assistant message) and
writes an updated solution. All turns of a round are simultaneous, so the Parallel API applies.
Final answer: plurality (``teamplay.envs.voting.plurality``, ties to the earliest debater) over the
answers of each debater's latest message; a debater that skipped the last round votes with its
earlier message. Initial answer: the plurality of round 0. Rounds ``>= 1`` are skippable by a
speak/skip controller; round 0 always speaks.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import MappingProxyType

from pydantic import Field

from teamplay.agents.roles import Team
from teamplay.envs.protocols.base import (
    PluralityVote,
    ProtocolState,
    RoleSpec,
    SkippableOptions,
    TurnSpec,
    latest_per_agent,
)
from teamplay.envs.protocols.registry import register_protocol
from teamplay.records import Message

DEBATER_PROMPT = ("You are one of several agents solving the same problem. Reason step by step. Read "
                  "the other agents' solutions critically: change your answer only if their reasoning "
                  "is better than yours.")
ANSWER_INSTRUCTION = "Solve the problem. Reason step by step, then give the final answer."
DEBATE_INSTRUCTION = ("Above are the latest solutions of all agents, yours included. Check their "
                      "reasoning, then give your updated solution and final answer.")


class DebateOptions(SkippableOptions):
    rounds: int = Field(2, ge=0, le=16, description="Debate rounds R after the first answers "
                                                    "(0 = a plain plurality vote).")
    n_agents: int | None = Field(None, ge=2, le=16, description="Number of debaters. None: the team "
                                 "decides (default team: 3).")


@register_protocol
class Debate(PluralityVote):
    """N debaters answer, then R rounds reading each other's latest answers; plurality of the last."""

    name = "debate"
    traits = frozenset({"every_agent_answers", "revises"})
    Options = DebateOptions
    roles = (RoleSpec("debater", DEBATER_PROMPT, count=3, min_count=2),)
    count_option_roles = ("debater",)
    voting_role = "debater"
    skip_means = MappingProxyType({
        "answer": "no first answer: the others read nothing from it and it does not vote",
        "debate": "keep: the debater's latest earlier answer is what the others read and what votes"})

    def schedule(self, team: Team) -> tuple[TurnSpec, ...]:
        agents = self.voters(team)
        return tuple(TurnSpec(a, "debater", "answer" if r == 0 else "debate", r)
                     for r in range(self.options.rounds + 1) for a in agents)

    def simultaneous(self, team: Team, round_turns: Sequence[TurnSpec]) -> bool:
        return True  # a turn only sees rounds before its own

    def visible(self, state: ProtocolState, turn: TurnSpec) -> list[Message]:
        if turn.round == 0:
            return []
        return latest_per_agent(state, self.voters(state.team), before_round=turn.round)

    def instruction(self, state: ProtocolState, turn: TurnSpec) -> str:
        return ANSWER_INSTRUCTION if turn.round == 0 else DEBATE_INSTRUCTION

    def may_skip(self, state: ProtocolState, turn: TurnSpec) -> bool:
        return turn.round > 0

"""``sequential``: K agents in a fixed order, each sees its predecessors (the COSAC setting).

Agent ``k`` (in team order: roles in the order given, instances by index) plays round ``k`` and
sees every earlier message. Final answer: the answer of the last agent's message (None if it gave
none: the chain's output is its last link). Initial answer: the first agent's answer. The team may
use any role names (one role per position gives each position its own adapter); roles without a
prompt use the chain-member prompt below.

Options beyond the chain length, for short answer-first chains (the credit-fidelity benchmark runs
them on a CPU): ``first_instruction`` and ``next_instruction`` replace the two turn instructions,
and ``reply_prefix`` (e.g. ``"The answer is"``) starts every model reply (the backend puts it after
the assistant generation prompt; the reply text keeps it). Every turn's request carries the running
answer, the chain's output so far (the latest link's answer; None before any, or after a link that
gave none), as ``metadata["pending_answer"]``, which scripted teammates such as ``noisy_teammate``
act on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field

from teamplay.agents.roles import Team
from teamplay.envs.protocols.base import (
    AnyRoleTeam,
    ProtocolState,
    ReplyPrefixOptions,
    RoleSpec,
    TurnSpec,
    instruction_option,
)
from teamplay.envs.protocols.registry import register_protocol

MEMBER_PROMPT = ("You are one member of a chain of problem solvers. Read your teammates' earlier work, "
                 "fix any mistake you find, and write a complete solution.")
FIRST_INSTRUCTION = "Solve the problem. Reason step by step, then give the final answer."
NEXT_INSTRUCTION = ("Your teammates' solutions are above. Check them step by step, correct any "
                    "mistake, and give your own complete solution with the final answer.")


class SequentialOptions(ReplyPrefixOptions):
    n_agents: int | None = Field(None, ge=1, le=16, description="Chain length K with the default "
                                 "team (one role 'solver' with K agents). None: 3, or the team's size.")
    first_instruction: str | None = instruction_option("The first agent's")
    next_instruction: str | None = instruction_option("Every later agent's")


@register_protocol
class Sequential(AnyRoleTeam):
    """K agents in a fixed order, each sees its predecessors; final answer = the last agent's."""

    name = "sequential"
    traits = frozenset({"every_agent_answers", "chain", "last_link_final"})
    Options = SequentialOptions
    roles = (RoleSpec("solver", MEMBER_PROMPT, count=3),)
    count_option_roles = ("solver",)

    def schedule(self, team: Team) -> tuple[TurnSpec, ...]:
        return tuple(TurnSpec(a, team.role_of(a).name, "solve" if k == 0 else "refine", k)
                     for k, a in enumerate(team.agent_ids()))

    def instruction(self, state: ProtocolState, turn: TurnSpec) -> str:
        if turn.round == 0:
            return self.options.first_instruction or FIRST_INSTRUCTION
        return self.options.next_instruction or NEXT_INSTRUCTION

    def turn_metadata(self, state: ProtocolState, turn: TurnSpec) -> Mapping[str, Any]:
        return {"pending_answer": self.final_answer(state)}

    def final_answer(self, state: ProtocolState) -> str | None:
        last = next((m for m in reversed(state.messages) if m.spoke), None)
        return last.answer if last is not None else None

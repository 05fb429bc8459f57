"""``single``: one solver answers once. The plain GRPO baseline every team is compared with."""

from __future__ import annotations

from teamplay.agents.roles import Team
from teamplay.envs.protocols.base import Protocol, ProtocolState, RoleSpec, TurnSpec
from teamplay.envs.protocols.registry import register_protocol

SOLVER_PROMPT = "You are a careful problem solver. Think step by step, then state the final answer."
SOLVE_INSTRUCTION = "Solve the problem. Reason step by step, then give the final answer."


@register_protocol
class Single(Protocol):
    """One solver, one turn; the final answer is the solver's answer."""

    name = "single"
    roles = (RoleSpec("solver", SOLVER_PROMPT, count=1, min_count=1, max_count=1),)

    def schedule(self, team: Team) -> tuple[TurnSpec, ...]:
        return (TurnSpec(agent="solver_0", role="solver", stage="solve", round=0),)

    def instruction(self, state: ProtocolState, turn: TurnSpec) -> str:
        return SOLVE_INSTRUCTION

    def final_answer(self, state: ProtocolState) -> str | None:
        latest = state.latest("solver_0")
        return latest.answer if latest is not None else None

"""``single``: one solver answers once. The plain GRPO baseline every team is compared with.

Also home of what the solver protocols share: the solver's default prompt and instruction, and
``IndependentSolvers``, the base of the protocols whose solvers each answer alone (``vote``,
``split``).
"""

from __future__ import annotations

from collections.abc import Sequence

from teamplay.agents.roles import Team
from teamplay.envs.protocols.base import Protocol, ProtocolState, RoleSpec, TurnSpec
from teamplay.envs.protocols.registry import register_protocol
from teamplay.records import Message

SOLVER_PROMPT = "You are a careful problem solver. Think step by step, then state the final answer."
SOLVE_INSTRUCTION = "Solve the problem. Reason step by step, then give the final answer."


@register_protocol
class Single(Protocol):
    """One solver, one turn; the final answer is the solver's answer."""

    name = "single"
    traits = frozenset({"every_agent_answers"})
    roles = (RoleSpec("solver", SOLVER_PROMPT, count=1, min_count=1, max_count=1),)

    def schedule(self, team: Team) -> tuple[TurnSpec, ...]:
        return (TurnSpec(agent="solver_0", role="solver", stage="solve", round=0),)

    def instruction(self, state: ProtocolState, turn: TurnSpec) -> str:
        return SOLVE_INSTRUCTION

    def final_answer(self, state: ProtocolState) -> str | None:
        return state.answer_of_latest("solver_0")


class IndependentSolvers(Protocol):
    """Base of protocols whose solvers each answer alone: a turn sees no message, so every round is
    simultaneous (the Parallel API applies). The solvers are the agents of role ``solver``
    (``SOLVER_PROMPT``; 3 in the default team), as many as the ``n_agents`` option says when it is
    given. The turn instruction is the ``instruction`` option (subclasses' ``Options`` declare it
    with ``instruction_option``), else ``SOLVE_INSTRUCTION``. Subclasses give the schedule and the
    final-answer rule."""

    roles = (RoleSpec("solver", SOLVER_PROMPT, count=3),)
    count_option_roles = ("solver",)

    def simultaneous(self, team: Team, round_turns: Sequence[TurnSpec]) -> bool:
        return True  # solvers see nothing of each other

    def visible(self, state: ProtocolState, turn: TurnSpec) -> list[Message]:
        return []

    def instruction(self, state: ProtocolState, turn: TurnSpec) -> str:
        return self.options.instruction or SOLVE_INSTRUCTION

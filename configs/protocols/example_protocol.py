"""A user protocol as a Python class: a planner writes a plan, solvers follow it, plurality vote.

Load it by path: ``get_protocol("configs/protocols/example_protocol.py", n_solvers=3)``. A protocol
file defines exactly one concrete ``Protocol`` subclass; it needs no registration.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from teamplay.agents.roles import Team
from teamplay.envs.protocols import Protocol, ProtocolOptions, ProtocolState, RoleSpec, TurnSpec
from teamplay.envs.protocols.base import plurality_of_latest
from teamplay.records import Message


class PlanSolveOptions(ProtocolOptions):
    n_solvers: int = Field(2, ge=1, le=8, description="Solvers following the plan.")


class PlanSolve(Protocol):
    """Planner writes a plan (no answer); solvers each follow it alone; plurality of the solvers."""

    name = "plan_solve"
    Options = PlanSolveOptions
    roles = (
        RoleSpec("planner", "You plan solutions. Write a short numbered plan of the steps needed to "
                            "solve the problem. Do not compute the answer.", count=1, max_count=1),
        RoleSpec("solver", "You are a careful problem solver. Follow the plan you are given step by "
                           "step, then state the final answer."),
    )

    def role_specs(self) -> tuple[RoleSpec, ...]:
        planner, solver = self.roles
        return (planner, RoleSpec(solver.name, solver.prompt, count=self.options.n_solvers))

    def schedule(self, team: Team) -> tuple[TurnSpec, ...]:
        plan = (TurnSpec("planner_0", "planner", "plan", 0),)
        return plan + tuple(TurnSpec(a, "solver", "solve", 1) for a in team.role("solver").agent_ids())

    def simultaneous(self, team: Team, round_turns: Sequence[TurnSpec]) -> bool:
        return True  # solvers see the plan only, never each other

    def visible(self, state: ProtocolState, turn: TurnSpec) -> list[Message]:
        return [m for m in state.spoken() if m.role == "planner"]

    def instruction(self, state: ProtocolState, turn: TurnSpec) -> str:
        if turn.role == "planner":
            return "Write the plan now: numbered steps, no final answer."
        return "Follow the plan above to solve the problem, then give the final answer."

    def final_answer(self, state: ProtocolState) -> str | None:
        return plurality_of_latest(state, state.team.role("solver").agent_ids())

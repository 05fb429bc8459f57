"""A protocol of your own as a Python class: a solver answers, a critic reads it, the solver revises.

What it shows: the parts of a ``Protocol`` (its roles with default prompts, its options, the turn
schedule, who sees what, each turn's instruction, the final-answer rule); that it is a PettingZoo
AEC environment like every built-in one (``pettingzoo.test.api_test`` passes); and one episode
played with a hand-written policy in PettingZoo's agent loop.

Run it:
    python examples/custom_protocol.py
Play or train it (a protocol file holds one Protocol subclass and is named by its path):
    teamplay play --task arith --protocol examples/custom_protocol.py --backend scripted
    protocol: {name: examples/custom_protocol.py, options: {revise: false}}
"""

from __future__ import annotations

import warnings

from pettingzoo.test import api_test
from pydantic import Field

from teamplay.agents.roles import Team
from teamplay.envs.protocols import Protocol, ProtocolOptions, ProtocolState, RoleSpec, TurnSpec
from teamplay.envs.tasks import get_task
from teamplay.envs.team_env import TeamEnv
from teamplay.records import Message, TurnRequest


class CritiqueOptions(ProtocolOptions):
    revise: bool = Field(True, description="Whether the solver revises after the critique.")


class SolveCritique(Protocol):
    """Solver answers; critic names the first mistake (no answer of its own); solver revises."""

    name = "solve_critique"
    Options = CritiqueOptions
    answer_roles = ("solver",)  # only the solver's answers can be the team's
    roles = (
        RoleSpec("solver", "You are a careful problem solver. Think step by step, then state the final "
                           "answer.", count=1, max_count=1),
        RoleSpec("critic", "You check solutions. Name the first mistake, if there is one. Do not give a "
                           "final answer yourself.", count=1, max_count=1),
    )

    def schedule(self, team: Team) -> tuple[TurnSpec, ...]:
        turns = (TurnSpec("solver_0", "solver", "solve", 0), TurnSpec("critic_0", "critic", "critique", 1))
        return turns + ((TurnSpec("solver_0", "solver", "revise", 2),) if self.options.revise else ())

    def visible(self, state: ProtocolState, turn: TurnSpec) -> list[Message]:
        return state.spoken()  # every earlier message

    def instruction(self, state: ProtocolState, turn: TurnSpec) -> str:
        return {"solve": "Solve the problem, then give the final answer.",
                "critique": "Check the solution above step by step and name the first mistake.",
                "revise": "Read the critique. Fix your solution if it is wrong, then give the final answer.",
                }[turn.stage]

    def final_answer(self, state: ProtocolState) -> str | None:
        return state.last_answer("solver_0")


def policy(request: TurnRequest) -> str:
    """A stand-in for a model: the solver is wrong at first and right after the critique."""
    if request.agent.startswith("critic"):
        return "The sum is off by one."
    value = int(request.item.reference) + (1 if request.stage == "solve" else 0)
    return f"The answer is {value}."


def main() -> None:
    task = get_task("arith")
    items = task.load("test", limit=3)
    with warnings.catch_warnings():  # api_test suggests Box/Discrete spaces; text is the point here
        warnings.simplefilter("ignore", UserWarning)
        api_test(TeamEnv(task, SolveCritique(), items=items), num_cycles=5)  # PettingZoo's own checker
    env = TeamEnv(task, SolveCritique(), items=items)
    env.reset(seed=0, options={"item": items[0]})
    for _agent in env.agent_iter():
        _, _, terminated, truncated, info = env.last()
        env.step(None if terminated or truncated else policy(info["turn"]))
    episode = env.episode()
    for m in episode.messages:
        print(f"{m.agent:>9} {m.stage:<9} {m.text}")
    print(f"final answer {episode.final_answer}, reference {items[0].reference}, team reward {episode.reward}")
    assert episode.reward == 1.0 and episode.messages[0].answer != items[0].reference
    short = TeamEnv(task, SolveCritique(revise=False), items=items)
    assert len(short.protocol.schedule(short.team)) == 2


if __name__ == "__main__":
    main()

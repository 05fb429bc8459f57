"""``vote``: N independent solvers, a plurality vote (self-consistency over parallel reasoning paths).

All solvers answer in one simultaneous round and see nothing but the problem. The final answer is
``teamplay.envs.voting.plurality`` of their answers in agent order (unparsable answers do not vote;
ties go to the answer voted first).

``rule: majority`` makes the team answer the strict majority instead (``strict_majority``: the
answer of more than K / 2 of the K solvers, abstainers included; none: no team answer, scored
wrong). Then the team reward is a threshold game, ``R = [sum_j c_j > K / 2]`` with ``c_j`` solver
j's own score (when every right answer is the same string), which the ``oracle`` credit's
``majority`` form solves in closed form. With the default ``plurality``, a right answer held by a
minority can still win when the wrong answers split, so the reward is not a threshold of the c_j.
Under ``rule: majority`` the masked transcript (``score_visible``, masking credit) is scored by the
same rule with the withheld solvers abstaining: ``v(S) = [right solvers in S > K / 2]``, a weighted
majority game with ``v(all) = R``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from teamplay.agents.roles import Team
from teamplay.envs.protocols.base import PluralityVote, ProtocolState, ReplyPrefixOptions, TurnSpec, instruction_option
from teamplay.envs.protocols.catalog.single import IndependentSolvers
from teamplay.envs.protocols.registry import register_protocol
from teamplay.envs.tasks.base import Task
from teamplay.envs.voting import strict_majority
from teamplay.records import Message, TaskItem


class VoteOptions(ReplyPrefixOptions):
    n_agents: int | None = Field(
        None, ge=1, le=64,
        description="Number of solvers. None: the team decides (default team: 3).")
    instruction: str | None = instruction_option("The solvers'")
    rule: Literal["plurality", "majority"] = Field(
        "plurality", description="Team answer: 'plurality' (most votes, ties to the earliest) or "
                                 "'majority' (more than half of all solvers, else none: a threshold game).")


@register_protocol
class Vote(PluralityVote, IndependentSolvers):
    """N independent solvers in one simultaneous round; final answer = their plurality (or strict majority)."""

    name = "vote"
    traits = frozenset({"every_agent_answers", "independent_vote"})
    Options = VoteOptions
    voting_role = "solver"

    def schedule(self, team: Team) -> tuple[TurnSpec, ...]:
        return tuple(TurnSpec(agent=a, role="solver", stage="solve", round=0) for a in self.voters(team))

    def final_answer(self, state: ProtocolState) -> str | None:
        if self.options.rule == "plurality":
            return super().final_answer(state)
        return strict_majority([state.answer_of_latest(a) for a in self.voters(state.team)])

    def score_visible(self, task: Task, item: TaskItem, messages: Sequence[Message],
                      withheld: Sequence[bool]) -> float:
        """``rule: majority``: the strict majority of the visible answers among all K solvers (a
        withheld solver abstains); ``plurality``: the base rule (the last visible answer)."""
        if self.options.rule == "plurality":
            return super().score_visible(task, item, messages, withheld)
        answers = [m.answer if m.spoke and not hidden else None
                   for m, hidden in zip(messages, withheld, strict=True) if m.role == "solver"]
        return float(task.score_answer(strict_majority(answers), item))

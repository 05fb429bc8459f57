"""``vote``: N independent solvers, majority vote (self-consistency over parallel reasoning paths).

All solvers answer in one simultaneous round and see nothing but the problem. The final answer is
``teamplay.envs.voting.majority`` of their answers in agent order (unparsable answers do not vote;
ties go to the answer voted first).
"""

from __future__ import annotations

from pydantic import Field

from teamplay.agents.roles import Team
from teamplay.envs.protocols.base import MajorityVote, ReplyPrefixOptions, TurnSpec, instruction_option
from teamplay.envs.protocols.registry import register_protocol
from teamplay.envs.protocols.single import IndependentSolvers


class VoteOptions(ReplyPrefixOptions):
    n_agents: int | None = Field(
        None, ge=1, le=64,
        description="Number of solvers. None: the team decides (default team: 3).")
    instruction: str | None = instruction_option("The solvers'")


@register_protocol
class Vote(MajorityVote, IndependentSolvers):
    """N independent solvers in one simultaneous round; final answer = majority vote."""

    name = "vote"
    Options = VoteOptions
    voting_role = "solver"

    def schedule(self, team: Team) -> tuple[TurnSpec, ...]:
        return tuple(TurnSpec(agent=a, role="solver", stage="solve", round=0) for a in self.voters(team))

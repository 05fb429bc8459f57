"""``paths``: K parallel reasoning paths, then a judge that reads them all and gives the team's answer
(the team of Parallel Shapley: paths as players, an aggregating judge).

Team: any roles. The one agent of the role named by the ``judge_role`` option (default ``judge``) is
the judge; every other agent, in team order, is a path. One role per path gives each path
its own policy (a scripted free rider beside learning paths) and adapter; one role with ``count: K``
gives the paths one shared adapter. ``n_paths``, when set, must equal the number of paths (the team
has K + 1 agents). Roles without a prompt get the path or judge default prompt below.

Schedule (``paths_see``):

* ``none`` (default): the K paths answer in one simultaneous round (round 0), each seeing only the
  problem, as independent samples would;
* ``earlier``: path k answers in round k and sees every earlier path's message, so a scripted
  ``copier`` path can copy (in a simultaneous round it sees nothing to copy);

then the judge answers in the last round (stage ``aggregate``), seeing every path's message. Every
round is simultaneous (no turn sees its own round), so the Parallel API applies to both.

Answers and scores: the team's answer is the judge's, and the team reward is the verifier's score of
it (a judge without an answer, or a judge turn skipped by a replay, scores 0: the paths' answers
never stand in for it). Before the judge's turn the team's answer is the plurality of the paths'
answers so far (ties to the earliest path), which is what the paths would answer without a judge
(``vote``): the episode's ``initial_answer``, read after round 0, is the paths' vote under ``none``
and the first path's answer under ``earlier``. ``Episode.agent_correct`` holds each path's own answer
scored by the verifier (0 without one), and the judge's (the team reward);
``Episode.metadata["path_answers"]`` each path's answer (None: none).

Masking credit (``score_visible``, the value of a coalition S as a masked transcript): the score of
the judge's answer when the judge is in S, else 0 (no judge, no team answer: the same value as a
replay with the judge skipped). Masking re-scores the recorded transcript, and the judge's answer was
written after reading every path, so withholding paths changes nothing: ``v(S) = R [judge in S]``,
and masking Shapley gives the judge all the credit and every path none. It cannot tell a working path
from a free rider. The utility that can is the generative judge (``shapley`` with ``value: judge``):
a credit judge reads the question and the messages of S (the others withheld) and writes an answer,
which the verifier scores; a path that adds nothing a judge can use (``silent``) is a null player and
gets 0. The team's own judge is a player there too: its message is one the credit judge may read.
``value: replay`` re-runs the team's own judge on S's paths instead (``answer_roles``: a coalition
without the judge is 0 at no cost).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from types import MappingProxyType
from typing import Any, Literal

from pydantic import Field

from teamplay.agents.roles import Role, Team
from teamplay.envs.protocols.base import (
    Protocol,
    ProtocolState,
    ReplyPrefixOptions,
    RoleSpec,
    TurnSpec,
    instruction_option,
    plurality_of_latest,
)
from teamplay.envs.protocols.catalog.single import SOLVE_INSTRUCTION, SOLVER_PROMPT
from teamplay.envs.protocols.registry import register_protocol
from teamplay.envs.tasks.base import Task
from teamplay.errors import ConfigError
from teamplay.records import Message, TaskItem

JUDGE_PROMPT = ("You are the judge of a team of problem solvers. Read the solutions of the team's reasoning "
                "paths critically, decide which final answer is correct, and state it.")
JUDGE_INSTRUCTION = ("Above are the solutions of the team's reasoning paths. Check their reasoning step by "
                     "step, decide which final answer is correct (it may be none of theirs), and give it.")
#: the stage of the judge's turn (``score_visible`` finds the judge's message by it)
AGGREGATE = "aggregate"
DEFAULT_PATHS = 3


class PathsOptions(ReplyPrefixOptions):
    n_paths: int | None = Field(None, ge=1, le=64, description=(
        "Number of paths K; the team then has K + 1 agents. None: every agent but the judge is a path "
        "(default team: 3 paths)."))
    judge_role: str = Field("judge", pattern=r"^[a-z][a-z0-9_]*$", description=(
        "The role whose one agent reads every path and gives the team's answer; every other role's "
        "agents are paths."))
    paths_see: Literal["none", "earlier"] = Field("none", description=(
        "What a path sees: 'none' (independent paths, one simultaneous round) or 'earlier' (path k, in "
        "round k, sees the earlier paths' messages)."))
    instruction: str | None = instruction_option("The paths'")
    judge_instruction: str | None = instruction_option("The judge's")


@register_protocol
class Paths(Protocol):
    """K reasoning paths, then a judge that reads them; team reward = the score of the judge's answer."""

    name = "paths"
    Options = PathsOptions
    roles = (RoleSpec("path", SOLVER_PROMPT, count=DEFAULT_PATHS),
             RoleSpec("judge", JUDGE_PROMPT, count=1, min_count=1, max_count=1))
    skip_means = MappingProxyType({AGGREGATE: "no aggregation: the team has no answer (reward 0)"})

    @property
    def answer_roles(self) -> tuple[str, ...]:
        """Only the judge's answer can be the team's (a property: the ``judge_role`` option names it)."""
        return (self.options.judge_role,)

    # ---- team: any path roles, one judge -------------------------------------------------------

    def role_specs(self) -> tuple[RoleSpec, ...]:
        """The default team's roles: ``path`` (``solver`` when the judge takes that name), K agents, and
        the judge role."""
        path, judge = self.roles
        judge_role = self.options.judge_role
        return (replace(path, name="solver" if judge_role == "path" else "path",
                        count=self.options.n_paths or DEFAULT_PATHS),
                replace(judge, name=judge_role))

    def validate_team(self, team: Team) -> None:
        judge = self.options.judge_role
        names = [r.name for r in team.roles]
        if judge not in names:
            raise ConfigError(f"team.roles: protocol 'paths' needs its judge role {judge!r} (option judge_role) "
                              f"in the team (team has: {', '.join(names)}); add it, or set judge_role to one of these")
        if team.role(judge).count != 1:
            raise ConfigError(f"team.roles[{judge!r}].count: protocol 'paths' has one judge, got "
                              f"{team.role(judge).count}; give the other agents roles of their own (they are paths)")
        k = len(self.paths(team))
        if k == 0:
            raise ConfigError(f"team.roles: protocol 'paths' needs at least one path besides the judge role "
                              f"{judge!r}; add a role for the paths")
        n = self.options.n_paths
        if n is not None and k != n:
            raise ConfigError(f"protocol 'paths' option n_paths={n} needs {n + 1} agents ({n} paths and the "
                              f"judge) but the team has {k + 1}; set only one of them")

    def paths(self, team: Team) -> list[str]:
        """The path agents, in team order (every agent not of the judge role)."""
        return [a for r in team.roles if r.name != self.options.judge_role for a in r.agent_ids()]

    def judge(self, team: Team) -> str:
        """The judge agent."""
        return team.role(self.options.judge_role).agent_ids()[0]

    def agent_order(self, team: Team) -> list[str]:
        return [*self.paths(team), self.judge(team)]

    def system_prompt(self, role: Role) -> str:
        if role.prompt is not None:
            return role.prompt
        return JUDGE_PROMPT if role.name == self.options.judge_role else SOLVER_PROMPT

    # ---- the plan ------------------------------------------------------------------------------

    def schedule(self, team: Team) -> tuple[TurnSpec, ...]:
        paths = self.paths(team)
        sequential = self.options.paths_see == "earlier"
        turns = [TurnSpec(a, team.role_of(a).name, "solve", k if sequential else 0) for k, a in enumerate(paths)]
        judge = TurnSpec(self.judge(team), self.options.judge_role, AGGREGATE, len(paths) if sequential else 1)
        return (*turns, judge)

    def simultaneous(self, team: Team, round_turns: Sequence[TurnSpec]) -> bool:
        # every turn sees all spoken messages of earlier rounds (the base ``visible``) and none of its
        # own: under 'none' the paths' round is planned whole, before any path answers; under
        # 'earlier' every round has one turn
        return True

    def instruction(self, state: ProtocolState, turn: TurnSpec) -> str:
        if turn.stage == AGGREGATE:
            return self.options.judge_instruction or JUDGE_INSTRUCTION
        return self.options.instruction or SOLVE_INSTRUCTION

    # ---- answer and scores ---------------------------------------------------------------------

    def final_answer(self, state: ProtocolState) -> str | None:
        """The judge's answer once its turn is recorded (None when it gave none or was skipped);
        before, the paths' plurality (module docstring)."""
        judge = self.judge(state.team)
        if any(m.agent == judge for m in state.messages):
            return state.answer_of_latest(judge)
        return plurality_of_latest(state, self.paths(state.team))

    def score_visible(self, task: Task, item: TaskItem, messages: Sequence[Message],
                      withheld: Sequence[bool]) -> float:
        """The score of the judge's answer when its message is visible, else of no answer (0)."""
        for m, hidden in zip(messages, withheld, strict=True):
            if m.stage == AGGREGATE and not hidden and m.spoke:
                return float(task.score_answer(m.answer, item))
        return float(task.score_answer(None, item))

    def episode_metadata(self, state: ProtocolState) -> dict[str, Any]:
        return {"path_answers": {a: state.answer_of_latest(a) for a in self.paths(state.team)},
                "paths_see": self.options.paths_see}

"""``split``: K solvers, each on its own sub-problem, in one simultaneous round (an additive team).

An item holds K problems (the ``tuples`` task: ``task: {name: tuples, options: {task: arith, k: 4}}``);
solver j (in team order) sees only problem j and nothing of the others. Each agent's score is its
own answer's score on its own problem, ``c_j``; the team reward is

* ``reward: fraction`` (default): ``R = (1/K) sum_j c_j``, the fraction right;
* ``reward: all`` (conjunctive): ``R = prod_j c_j``, 1 only when every answer is right.

Its characteristic function (``score_visible``, what masking credit asks of a coalition S) scores
the coalition by its own members' answers: ``v(S) = (1/K) sum_{j in S} c_j`` (fraction) or
``prod_j [j in S] c_j`` (all). Under ``fraction`` the game is additive, so agent j's Shapley value,
its difference reward and ``E[R | its answer] - E[R]`` all equal ``c_j / K`` up to a constant: the
setting where credit must pay if it ever does (broadcast's variance for agent j carries every other
agent's noise, about K times its own).

Any team of solver roles fits: one role ``solver`` with count K (one adapter shared by all) or K
roles of one agent each (one adapter per agent); a role without a prompt gets the default. The
team's final answer is the K answers joined by ``"; "`` (``?`` for no answer).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Literal

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
from teamplay.envs.protocols.catalog.single import SOLVER_PROMPT, IndependentSolvers
from teamplay.envs.protocols.registry import register_protocol
from teamplay.envs.tasks.base import Task
from teamplay.envs.tasks.catalog.tuples import MAX_PARTS, part, parts_of
from teamplay.errors import ConfigError
from teamplay.records import ChatMessage, Message, TaskItem, TurnRequest


class SplitOptions(ReplyPrefixOptions):
    n_agents: int | None = Field(None, ge=1, le=MAX_PARTS,
                                 description="Number of solvers K. None: the team decides (default team: 2).")
    reward: Literal["fraction", "all"] = Field(
        "fraction", description="'fraction': the share of sub-problems solved (additive); 'all': 1 only "
                                "when every solver is right (conjunctive).")
    instruction: str | None = instruction_option("The solvers'")


@register_protocol
class Split(AnyRoleTeam, IndependentSolvers):
    """K solvers, one sub-problem each, one simultaneous round; reward: the fraction right (or all)."""

    name = "split"
    traits = frozenset({"scored_parts"})
    Options = SplitOptions
    roles = (RoleSpec("solver", SOLVER_PROMPT, count=2),)
    example_task = "tuples"

    # ---- team: any roles, every agent a solver ------------------------------------------------

    def validate_team(self, team: Team) -> None:
        super().validate_team(team)
        n = sum(r.count for r in team.roles)
        if n > MAX_PARTS:
            raise ConfigError(f"team.roles: protocol 'split' takes at most {MAX_PARTS} agents, got {n}")

    def check_task(self, task: Task, team: Team) -> None:
        k = getattr(task, "parts_per_item", None)
        n = sum(r.count for r in team.roles)
        if k != n:
            got = f"items of {k} problems" if k is not None else f"task {task.name!r}, one problem per item"
            raise ConfigError(f"protocol 'split' gives each of its {n} agents its own problem: it needs items "
                              f"of {n} problems (task: {{name: tuples, options: {{task: ..., k: {n}}}}}), "
                              f"got {got}")

    # ---- the plan ------------------------------------------------------------------------------

    def schedule(self, team: Team) -> tuple[TurnSpec, ...]:
        return tuple(TurnSpec(agent=a, role=team.role_of(a).name, stage="solve", round=0)
                     for a in self.agent_order(team))

    def build_request(self, state: ProtocolState, turn: TurnSpec) -> TurnRequest:
        """The base request with the agent's own problem in place of the tuple (``chat[1]`` and
        ``item``, so a scripted policy answers its own part too)."""
        request = super().build_request(state, turn)
        own = self._part(state.item, self.agent_order(state.team).index(turn.agent))
        chat = (request.chat[0], ChatMessage("user", own.prompt), *request.chat[2:])
        return replace(request, chat=chat, item=own)

    @staticmethod
    def _part(item: TaskItem, j: int) -> TaskItem:
        if j >= parts_of(item):
            raise ConfigError(f"protocol 'split': item {item.id!r} holds {parts_of(item)} problems, not one for "
                              f"agent {j + 1}; use the tuples task with k = the number of agents")
        return part(item, j)

    # ---- answer and scores ---------------------------------------------------------------------

    def final_answer(self, state: ProtocolState) -> str | None:
        answers = [m.answer for m in state.messages]
        if not answers or all(a is None for a in answers):
            return None
        return "; ".join(a if a is not None else "?" for a in answers)

    def _scores(self, task: Task, item: TaskItem, messages: Sequence[Message],
                withheld: Sequence[bool]) -> list[float]:
        """Per message j (agent j's turn), its answer's score on problem j; 0 when withheld."""
        return [0.0 if hidden or not m.spoke else float(task.score_answer(m.answer, self._part(item, j)))
                for j, (m, hidden) in enumerate(zip(messages, withheld, strict=True))]

    def _combine(self, scores: Sequence[float], k: int) -> float:
        if self.options.reward == "fraction":
            return sum(scores) / k
        out = 1.0 if len(scores) == k else 0.0  # a message missing from a prefix is not right
        for c in scores:
            out *= c
        return out

    def outcome(self, state: ProtocolState, task: Task, final: str | None,
                answers: Mapping[str, str | None]) -> tuple[float, dict[str, float]]:
        messages = state.messages
        scores = self._scores(task, state.item, messages, [False] * len(messages))
        return self._combine(scores, parts_of(state.item)), {m.agent: c for m, c in zip(messages, scores, strict=True)}

    def score_visible(self, task: Task, item: TaskItem, messages: Sequence[Message],
                      withheld: Sequence[bool]) -> float:
        """``v(S)`` from the members' own answers only (module docstring)."""
        return self._combine(self._scores(task, item, messages, withheld), parts_of(item))

    def episode_metadata(self, state: ProtocolState) -> dict:
        return {"parts": parts_of(state.item), "reward_rule": self.options.reward}

"""``relay``: hidden information. K - 1 informants each hold one operand; the answerer holds none and
must read them.

An item's ``metadata["operands"]`` splits the problem into K - 1 pieces (the ``relay_sum`` task:
``task: {name: relay_sum, options: {n_operands: K - 1}}``). Round 0: informant j (in index order)
sees only its own operand, as its problem (``"Your number is 47. ..."``), and nothing of the others
(the informants answer simultaneously). Round 1: the answerer sees every informant's message and no
operand: its problem text says only how many numbers its teammates hold. Its answer is the team's;
the team reward is its score against the item (the sum), ``R = c_answerer``.

Per-agent scores (``Episode.agent_correct``): informant j's is its own answer's score against its
operand, ``c_j`` (1 when it stated its operand: its piece can reach the answer); the answerer's is
``R``. A faithful answerer (one that sums what it reads, like the scripted ``adder``) makes the team
conjunctive: ``R = prod_j c_j`` over the informants. Its characteristic function
(``score_visible``, a coalition S as a masked transcript) follows that reading: an operand withheld
never reaches the answer, ``v(S) = [answerer in S] c_answerer prod_j [j in S] c_j``. The ``oracle``
credit's ``relay`` form gives the closed-form A* of that game (``teamplay.credit.methods.oracle``).

Roles: ``informant`` (K - 1 agents, 1 to ``MAX_OPERANDS``, one adapter shared by all) and
``answerer`` (exactly one). ``n_agents`` sets K, the team's size.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from pydantic import Field

from teamplay.agents.roles import Team
from teamplay.envs.protocols.base import (
    Protocol,
    ProtocolState,
    ReplyPrefixOptions,
    RoleSpec,
    TurnSpec,
    instruction_option,
)
from teamplay.envs.protocols.registry import register_protocol
from teamplay.envs.tasks.base import Task
from teamplay.envs.tasks.catalog.relay_sum import MAX_OPERANDS
from teamplay.errors import ConfigError
from teamplay.records import ChatMessage, Message, TaskItem, TurnRequest

INFORMANT_PROMPT = ("You are an informant in a team. You hold one number that only you can see; the answerer "
                    "can see only your message. State your number clearly.")
ANSWERER_PROMPT = ("You are the answerer of a team. You cannot see the problem's numbers; your teammates each "
                   "hold one. Read their messages, add their numbers, and state the final answer.")
INFORM_INSTRUCTION = "Tell the answerer your number, then end with the number as your answer."
ANSWER_INSTRUCTION = "Your teammates' messages are above. Add their numbers, then give the final answer."


class RelayOptions(ReplyPrefixOptions):
    n_agents: int | None = Field(None, ge=2, le=MAX_OPERANDS + 1, description=(
        "Team size K: K - 1 informants and one answerer. None: the team decides (default team: 3)."))
    informant_instruction: str | None = instruction_option("The informants'")
    answerer_instruction: str | None = instruction_option("The answerer's")


def operands_of(item: TaskItem) -> tuple[str, ...]:
    """The operands of ``item`` as text (``metadata["operands"]``; () when it has none)."""
    return tuple(str(x) for x in item.metadata.get("operands", ()))


@register_protocol
class Relay(Protocol):
    """K - 1 informants state their hidden operands, one answerer combines them (module docstring)."""

    name = "relay"
    traits = frozenset({"informants"})
    Options = RelayOptions
    roles = (RoleSpec("informant", INFORMANT_PROMPT, count=2, max_count=MAX_OPERANDS),
             RoleSpec("answerer", ANSWERER_PROMPT, count=1, max_count=1))
    answer_roles = ("answerer",)
    example_task = "relay_sum"

    # ---- team ----------------------------------------------------------------------------------

    def role_specs(self) -> tuple[RoleSpec, ...]:
        """The informants' count is ``n_agents - 1`` when ``n_agents`` is given."""
        informant, answerer = self.roles
        n = self.options.n_agents
        return self.roles if n is None else (replace(informant, count=n - 1), answerer)

    def validate_team(self, team: Team) -> None:
        super().validate_team(team)
        n, size = self.options.n_agents, len(team.agent_ids())
        if n is not None and size != n:
            raise ConfigError(f"protocol 'relay' option n_agents={n} but the team has {size} agents "
                              f"({team.role('informant').count} informants + 1 answerer); set only one of them")

    def informants(self, team: Team) -> list[str]:
        """The informant ids by index: informant j holds operand j."""
        return team.role("informant").agent_ids()

    def check_task(self, task: Task, team: Team) -> None:
        n = team.role("informant").count
        k = getattr(task, "operands_per_item", None)
        if k != n:
            got = f"items of {k} operands" if k is not None else f"task {task.name!r}, no operands per item"
            raise ConfigError(f"protocol 'relay' gives each of its {n} informants one operand: it needs items of "
                              f"{n} operands (task: {{name: relay_sum, options: {{n_operands: {n}}}}}), got {got}")

    # ---- the plan ------------------------------------------------------------------------------

    def schedule(self, team: Team) -> tuple[TurnSpec, ...]:
        inform = tuple(TurnSpec(a, "informant", "inform", 0) for a in self.informants(team))
        return (*inform, TurnSpec("answerer_0", "answerer", "answer", 1))

    def simultaneous(self, team: Team, round_turns: Sequence[TurnSpec]) -> bool:
        return True  # informants see nothing of each other; the answer round is one turn

    def visible(self, state: ProtocolState, turn: TurnSpec) -> list[Message]:
        return [] if turn.role == "informant" else [m for m in state.spoken() if m.role == "informant"]

    def instruction(self, state: ProtocolState, turn: TurnSpec) -> str:
        if turn.role == "informant":
            return self.options.informant_instruction or INFORM_INSTRUCTION
        return self.options.answerer_instruction or ANSWER_INSTRUCTION

    def build_request(self, state: ProtocolState, turn: TurnSpec) -> TurnRequest:
        """The base request with the agent's own view of the problem in place of it (``chat[1]``
        and ``item``): an informant's operand (its item's reference, so a scripted policy states
        it), or for the answerer the problem with every operand left out."""
        request = super().build_request(state, turn)
        own = self._view(state, turn)
        chat = (request.chat[0], ChatMessage("user", own.prompt), *request.chat[2:])
        return replace(request, chat=chat, item=own)

    def _view(self, state: ProtocolState, turn: TurnSpec) -> TaskItem:
        """What ``turn``'s agent may know of ``state.item``: an item of its own (module docstring)."""
        item, informants = state.item, self.informants(state.team)
        operands = operands_of(item)
        if len(operands) != len(informants):
            raise ConfigError(f"protocol 'relay': item {item.id!r} holds {len(operands)} operands, not one per "
                              f"informant ({len(informants)}); use the relay_sum task with n_operands = "
                              f"{len(informants)}")
        if turn.role == "informant":
            j = informants.index(turn.agent)
            return TaskItem(id=f"{item.id}#operand{j}", reference=operands[j], metadata={"operand_index": j},
                            prompt=f"Your number is {operands[j]}. The answerer needs it to compute a sum.")
        # the reference stays (scripted oracles and scoring need it); the operands do not
        return TaskItem(id=item.id, reference=item.reference, prompt=(
            f"Each of your {len(operands)} teammates holds one number. The answer is the sum of their numbers."))

    # ---- answer and scores ---------------------------------------------------------------------

    def final_answer(self, state: ProtocolState) -> str | None:
        return state.answer_of_latest("answerer_0")

    def _informant_scores(self, task: Task, item: TaskItem, messages: Sequence[Message],
                          withheld: Sequence[bool]) -> list[float]:
        """c_j per informant message, in order: its answer's score on its operand; 0 when withheld
        or skipped."""
        operands = operands_of(item)
        scores = []
        for m, hidden in zip(messages, withheld, strict=True):
            if m.role != "informant":
                continue
            j = len(scores)
            own = TaskItem(id=f"{item.id}#operand{j}", prompt="", reference=operands[j])
            scores.append(0.0 if hidden or not m.spoke else float(task.score_answer(m.answer, own)))
        return scores

    def outcome(self, state: ProtocolState, task: Task, final: str | None,
                answers: Mapping[str, str | None]) -> tuple[float, dict[str, float]]:
        messages = state.messages
        reward = float(task.score_answer(final, state.item))
        scores = self._informant_scores(task, state.item, messages, [False] * len(messages))
        informants = [m.agent for m in messages if m.role == "informant"]
        return reward, {**dict(zip(informants, scores, strict=True)), "answerer_0": reward}

    def score_visible(self, task: Task, item: TaskItem, messages: Sequence[Message],
                      withheld: Sequence[bool]) -> float:
        """``v(S) = [answerer in S] c_answerer prod_j [j in S] c_j`` (module docstring); a prefix
        without the answerer's message scores 0."""
        value = 0.0
        for m, hidden in zip(messages, withheld, strict=True):
            if m.role == "answerer" and m.spoke and not hidden:
                value = float(task.score_answer(m.answer, item))
        for c in self._informant_scores(task, item, messages, withheld):
            value *= c
        return value

    def episode_metadata(self, state: ProtocolState) -> dict[str, Any]:
        return {"informants": len(self.informants(state.team))}

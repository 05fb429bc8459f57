"""The Protocol base class: who speaks when, who sees what, and how the final answer is chosen.

A protocol is a stateless rule book shared by many environments; everything that changes during an
episode lives in a ``ProtocolState`` that the driver (``teamplay.envs.protocols.driver``) creates per
episode and hands to the protocol's hooks. The life of an episode:

    state = protocol.new_state(item, team, answer_instruction)
    for each round r of protocol.schedule(team):            # a static plan of TurnSpecs
        for each turn of round r:
            request = protocol.build_request(state, turn)   # chat = system, problem, visible, instruction
            if protocol.may_skip(state, turn) and not protocol.controller(decision): skipped message
            else: the agent answers -> Message
            protocol.update(state, message)                 # pending answers, verdicts, ...
    final = protocol.final_answer(state)

Chat convention of every ``TurnRequest`` (``teamplay.agents.prompts`` relies on it):
``chat[0]`` system = role prompt + the task's answer instruction; ``chat[1]`` user = the problem;
``chat[2:-1]`` the visible transcript: other agents' messages as user messages headed
``"[reviewer_0, round 2]: "`` (rounds are 1-based in headers), this agent's own earlier messages as
assistant messages; ``chat[-1]`` user = the instruction for this turn.

Speak/skip hook: before a turn for which ``may_skip`` is True, the driver calls
``protocol.controller(TurnDecision)``, which returns a bool (True = speak) or a ``ControllerChoice``.
A skipped turn costs no generation and is recorded as a ``Message`` with ``spoke=False`` and
``text=""``; each decision is logged in ``Episode.decisions``. The default controller is
None: every turn speaks. Learned controllers (``teamplay.training.play.controllers``, regret matching) plug
in through the ``controller`` option.

Subclassing (see ``configs/protocols/example_protocol.py``): set ``name``, ``roles`` (with default
prompts and counts), ``Options`` if the protocol takes options (``count_option_roles`` where an
``n_agents`` option sets the count of roles), and implement ``schedule``,
``instruction`` and ``final_answer``; override ``visible``, ``update``, ``may_skip``,
``turn_metadata`` or ``new_state`` where the defaults (see everything, no state, never skip) do not
fit.
"""

from __future__ import annotations

import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Annotated, Any, ClassVar

import numpy as np
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from teamplay.agents.roles import Role, Team
from teamplay.envs.tasks.base import Task
from teamplay.envs.voting import plurality
from teamplay.errors import ConfigError
from teamplay.records import ChatMessage, ControllerDecision, Message, TaskItem, TurnRequest


@dataclass(frozen=True)
class TurnSpec:
    """One planned turn: ``agent`` (of role ``role``) acts in ``round`` for ``stage``."""

    agent: str
    role: str
    stage: str
    round: int


@dataclass(frozen=True)
class RoleSpec:
    """A role a protocol uses: its default prompt and the agent counts it accepts.

    ``count`` is the default team's count; ``min_count``/``max_count`` bound a user's team
    (``max_count=None``: no upper bound). ``prompt=None``: the team must give the role a prompt.
    """

    name: str
    prompt: str | None
    count: int = 1
    min_count: int = 1
    max_count: int | None = None


@dataclass(frozen=True)
class TurnDecision:
    """What a speak/skip controller sees before a skippable turn.

    Fields:
        turn: the planned turn.
        rounds: number of rounds in the schedule (``turn.round`` is 0-based), for "last round" logic.
        request: the request the agent would get if it speaks (visible transcript, metadata such as
            ``pending_answer``, the item).
        rng: a generator seeded by the env's ``reset(seed=...)``, so sampled controllers reproduce.
    """

    turn: TurnSpec
    rounds: int
    request: TurnRequest
    rng: np.random.Generator


@dataclass(frozen=True)
class ControllerChoice:
    """A controller's answer with more than speak/skip (what learned controllers return).

    The driver copies every field but ``counterfactual`` into the decision's
    :class:`~teamplay.records.ControllerDecision` in ``Episode.decisions``.

    Fields:
        speak: True to speak, False to skip.
        counterfactual: only with ``speak=False``: publish the turn anyway, marked
            ``TurnRequest.metadata["counterfactual"] = True``, so the policy writes what it would have
            said. The text is kept in the decision log, never in the transcript, and costs the team
            no call (training uses it to value the unchosen *speak*).
        state: the learner's information state (None: this stage is not learned).
        mode: the controller mode that decided.
        pending_answer, previous_answer: facts the learner needs later (see ``ControllerDecision``).
        extra: JSON-ready facts of a user's own controller.
    """

    speak: bool
    counterfactual: bool = False
    state: tuple[str, ...] | None = None
    mode: str | None = None
    pending_answer: str | None = None
    previous_answer: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def decision(self, turn: TurnSpec) -> ControllerDecision:
        """The log record of this choice for ``turn``."""
        return ControllerDecision(agent=turn.agent, stage=turn.stage, round=turn.round, spoke=self.speak,
                                  state=self.state, mode=self.mode, pending_answer=self.pending_answer,
                                  previous_answer=self.previous_answer, extra=self.extra)


#: ``controller(decision) -> True`` to speak, ``False`` to skip, or a ``ControllerChoice``.
Controller = Callable[[TurnDecision], bool | ControllerChoice]


class ProtocolOptions(BaseModel):
    """Options every protocol accepts (none). Subclasses add fields with descriptions."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)


def check_one_line(value: str) -> str:
    """A reply prefix is the start of one line."""
    if "\n" in value:
        raise ValueError(f"{value!r} spans lines; a reply prefix is the start of one line")
    return value


#: text a model reply starts with ('' for none): the start of one line, at most 64 characters. Model
#: backends put it after the assistant generation prompt, so the model goes on from it.
ReplyPrefix = Annotated[str, Field(max_length=64), AfterValidator(check_one_line)]


class ReplyPrefixOptions(ProtocolOptions):
    """Options of protocols whose model replies may start with a fixed text (answer-first replies)."""

    reply_prefix: ReplyPrefix = Field("", description=(
        "Text every model reply starts with, e.g. 'The answer is' (empty: none)."))


def instruction_option(whose: str) -> Any:
    """The field of an option that replaces one of a protocol's turn instructions (None: the
    protocol's default text); ``whose`` opens its description, e.g. ``"The solvers'"``."""
    return Field(None, min_length=1, max_length=2000,
                 description=f"{whose} turn instruction (None: the default).")


class SkippableOptions(ProtocolOptions):
    """Options of protocols with skippable turns."""

    controller: Controller | None = Field(
        None, description="Speak/skip controller called before each skippable turn; returns True "
                          "to speak. None: every turn speaks.")


@dataclass
class ProtocolState:
    """Mutable per-episode state handed to the protocol hooks.

    Fields:
        item: the problem.
        team: the team playing it.
        answer_instruction: the task's sentence on how to state the final answer.
        messages: every message so far (skipped turns included), in order.
    Subclasses add protocol-specific fields (pending answer, verdicts, ...).
    """

    item: TaskItem
    team: Team
    answer_instruction: str
    messages: list[Message] = field(default_factory=list)

    def spoken(self) -> list[Message]:
        """Messages that were actually said (skipped turns carry no content)."""
        return [m for m in self.messages if m.spoke]

    def latest(self, agent: str, before_round: int | None = None) -> Message | None:
        """``agent``'s latest spoken message (only rounds < ``before_round`` when given)."""
        for m in reversed(self.messages):
            if m.agent == agent and m.spoke and (before_round is None or m.round < before_round):
                return m
        return None

    def answer_of_latest(self, agent: str) -> str | None:
        """The answer of ``agent``'s latest spoken message (None: no such message, or it gave no
        answer; unlike ``last_answer``, an earlier answer does not stand in)."""
        latest = self.latest(agent)
        return latest.answer if latest is not None else None

    def last_answer(self, agent: str) -> str | None:
        """``agent``'s latest non-None answer (what ``Episode.agent_answers`` records)."""
        for m in reversed(self.messages):
            if m.agent == agent and m.answer is not None:
                return m.answer
        return None


class Protocol(ABC):
    """Base class of team protocols. Instances are immutable rule books; see the module docstring.

    Class attributes:
        name: registry name.
        roles: the roles the protocol knows, in protocol order, with default prompts and counts.
        Options: pydantic model of the protocol's options (``extra="forbid"``).
        skip_means: per stage, what a skipped (or removed) turn means.
        answer_roles: roles whose answers can be the team's (None: all).
        count_option_roles: roles whose agent count the ``n_agents`` option sets.
        traits: what the protocol promises about its episodes (``teamplay.envs.protocols.traits``),
            the facts credit methods ask for instead of its name.
        example_task: a task its default team plays, where its items need a shape of their own.
    """

    name: ClassVar[str] = ""
    roles: ClassVar[tuple[RoleSpec, ...]] = ()
    Options: ClassVar[type[ProtocolOptions]] = ProtocolOptions
    #: what a skipped turn (a removed agent under replay ``removal: skip``, or a controller's skip)
    #: means, per stage; stages not listed: the turn did not happen, later turns and the
    #: final-answer rule see only spoken messages.
    skip_means: ClassVar[Mapping[str, str]] = MappingProxyType({})
    #: roles whose messages can become the team's answer (None: every role); credit methods that
    #: treat agents as answer candidates (shape_max) refuse protocols where some role never answers.
    answer_roles: ClassVar[tuple[str, ...] | None] = None
    #: stages whose turns judge the pending answer (RIGHT/WRONG) instead of answering; their
    #: requests carry ``expects="verdict"`` so any policy, scripted or learned, knows the task
    verdict_stages: ClassVar[frozenset[str]] = frozenset()
    #: roles whose agent count the protocol's ``n_agents`` option sets when it is given (None: the
    #: team decides): ``role_specs`` gives them that count and ``validate_team`` refuses a team
    #: whose count disagrees
    count_option_roles: ClassVar[tuple[str, ...]] = ()
    #: a registered task (``teamplay.envs.tasks``) whose items, with its default options, the
    #: default team plays, for protocols whose items need a shape of their own (``relay``: operands,
    #: ``split``: sub-problems); None: any task fits. Checks that play every registered protocol
    #: (the PettingZoo conformance matrix, ``tests/envs/conformance.py``) play it on this task.
    example_task: ClassVar[str | None] = None
    #: names of ``teamplay.envs.protocols.traits.TRAITS`` the protocol promises (checked when it is
    #: registered or loaded from a file); a credit method that needs a trait refuses a protocol
    #: that does not declare it
    traits: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, **options: Any) -> None:
        self.options = _validate_options(self.name or type(self).__name__, self.Options, options)

    # ---- team -------------------------------------------------------------------------------

    def role_specs(self) -> tuple[RoleSpec, ...]:
        """The roles with counts adjusted by options: ``n_agents`` for ``count_option_roles``
        (override when another option sets a count)."""
        n = self._count_option()
        if n is None:
            return self.roles
        return tuple(replace(s, count=n) if s.name in self.count_option_roles else s for s in self.roles)

    def default_team(self) -> Team:
        """One ``Role`` per ``RoleSpec`` with its default count (prompts stay None: defaults apply)."""
        return Team(roles=tuple(Role(name=s.name, count=s.count) for s in self.role_specs()))

    def validate_team(self, team: Team) -> None:
        """Raise ``ConfigError`` naming the role when ``team`` does not fit this protocol."""
        specs = {s.name: s for s in self.role_specs()}
        known = ", ".join(specs) or "none"
        for role in team.roles:
            spec = specs.get(role.name)
            if spec is None:
                raise ConfigError(f"team.roles: role {role.name!r} is not used by protocol "
                                  f"{self.name!r} (its roles: {known})")
            if role.count < spec.min_count or (spec.max_count is not None and role.count > spec.max_count):
                bound = (f"exactly {spec.min_count}" if spec.min_count == spec.max_count else
                         f"at least {spec.min_count}" if spec.max_count is None else
                         f"{spec.min_count} to {spec.max_count}")
                raise ConfigError(f"team.roles[{role.name!r}].count: protocol {self.name!r} needs "
                                  f"{bound} agent(s) of this role, got {role.count}")
            if role.prompt is None and spec.prompt is None:
                raise ConfigError(f"team.roles[{role.name!r}].prompt: protocol {self.name!r} has no "
                                  f"default prompt for this role; give it a prompt")
        present = {r.name for r in team.roles}
        missing = [name for name in specs if name not in present]
        if missing:
            raise ConfigError(f"team.roles: protocol {self.name!r} needs role(s) {', '.join(missing)} "
                              f"(team has: {', '.join(sorted(present))})")
        for name in self.count_option_roles:
            check_count_option(self, team, name, self._count_option())

    def _count_option(self) -> int | None:
        """The ``n_agents`` option of a protocol with ``count_option_roles`` (None: not set)."""
        return getattr(self.options, "n_agents", None) if self.count_option_roles else None

    def agent_order(self, team: Team) -> list[str]:
        """Agent ids in protocol order: roles in ``roles`` order, instances by index."""
        rank = {s.name: i for i, s in enumerate(self.role_specs())}
        ordered = sorted(team.roles, key=lambda r: rank.get(r.name, len(rank)))
        return [a for r in ordered for a in r.agent_ids()]

    def system_prompt(self, role: Role) -> str:
        """The role's own prompt, else the protocol's default for that role name."""
        if role.prompt is not None:
            return role.prompt
        for spec in self.role_specs():
            if spec.name == role.name and spec.prompt is not None:
                return spec.prompt
        raise ConfigError(f"team.roles[{role.name!r}].prompt: protocol {self.name!r} has no default "
                          f"prompt for this role; give it a prompt")

    # ---- the plan ---------------------------------------------------------------------------

    @abstractmethod
    def schedule(self, team: Team) -> tuple[TurnSpec, ...]:
        """Every turn of an episode in order; rounds are 0-based and non-decreasing."""

    def simultaneous(self, team: Team, round_turns: Sequence[TurnSpec]) -> bool:
        """Whether the turns of one round may be asked all at once: no turn sees another message of
        the same round and no hook reads one. Default: True for one-turn rounds only."""
        return len(round_turns) <= 1

    def supports_parallel(self, team: Team) -> bool:
        """Whether every round is simultaneous and each agent acts at most once per round, which
        the PettingZoo Parallel API (all live agents act together) needs."""
        for turns in rounds_of(self.schedule(team)):
            agents = [t.agent for t in turns]
            if len(set(agents)) != len(agents) or not self.simultaneous(team, turns):
                return False
        return True

    # ---- one turn ---------------------------------------------------------------------------

    def new_state(self, item: TaskItem, team: Team, answer_instruction: str) -> ProtocolState:
        return ProtocolState(item=item, team=team, answer_instruction=answer_instruction)

    def visible(self, state: ProtocolState, turn: TurnSpec) -> list[Message]:
        """Messages ``turn`` sees, oldest first. Default: every spoken message so far."""
        return state.spoken()

    @abstractmethod
    def instruction(self, state: ProtocolState, turn: TurnSpec) -> str:
        """The user instruction that ends the chat of ``turn``."""

    def turn_metadata(self, state: ProtocolState, turn: TurnSpec) -> Mapping[str, Any]:
        """Extras for ``TurnRequest.metadata`` (e.g. the answer under review)."""
        return {}

    def may_skip(self, state: ProtocolState, turn: TurnSpec) -> bool:
        """Whether the controller is asked before ``turn``. Default: never."""
        return False

    @property
    def controller(self) -> Controller | None:
        return getattr(self.options, "controller", None)

    def update(self, state: ProtocolState, message: Message) -> None:  # noqa: B027  (optional hook)
        """React to ``message`` (already appended to ``state.messages``). Default: nothing."""

    @abstractmethod
    def final_answer(self, state: ProtocolState) -> str | None:
        """The team's answer given the messages so far (also used after round 0 for
        ``initial_answer``)."""

    def episode_metadata(self, state: ProtocolState) -> dict[str, Any]:
        """Protocol extras for ``Episode.metadata`` (verdicts, votes, ...)."""
        return {}

    # ---- scoring ----------------------------------------------------------------------------

    def check_task(self, task: Task, team: Team) -> None:  # noqa: B027  (optional hook)
        """Raise ``ConfigError`` when ``task``'s items cannot be played by ``team`` under this
        protocol (called once, when an env is built). Default: every task fits."""

    def outcome(self, state: ProtocolState, task: Task, final: str | None,
                answers: Mapping[str, str | None]) -> tuple[float, dict[str, float]]:
        """(team reward, per agent the score of its own last answer) at the end of an episode.
        Default: the verifier's score of the final answer, and of each agent's answer, against the
        one problem of the episode."""
        item = state.item
        return (float(task.score_answer(final, item)),
                {a: float(task.score_answer(ans, item)) for a, ans in answers.items()})

    def score_visible(self, task: Task, item: TaskItem, messages: Sequence[Message],
                      withheld: Sequence[bool]) -> float:
        """The team reward of a transcript with the ``withheld`` messages masked (what masking
        credit asks of a coalition), [T] flags for [T] messages. Default: the score of the last
        visible answer (the team's answer becomes the latest answer still in the transcript)."""
        for m, hidden in zip(reversed(messages), reversed(withheld), strict=True):
            if not hidden and m.spoke and m.answer is not None:
                return float(task.score_answer(m.answer, item))
        return float(task.score_answer(None, item))

    def build_request(self, state: ProtocolState, turn: TurnSpec) -> TurnRequest:
        """The ``TurnRequest`` of ``turn`` following the chat convention of this module."""
        role = state.team.role(turn.role)
        visible = tuple(self.visible(state, turn))
        chat = [ChatMessage("system", f"{self.system_prompt(role)} {state.answer_instruction}".strip()),
                ChatMessage("user", state.item.prompt)]
        chat += [render_entry(m, turn.agent) for m in visible]
        chat.append(ChatMessage("user", self.instruction(state, turn)))
        return TurnRequest(
            agent=turn.agent, role=turn.role, stage=turn.stage, round=turn.round, chat=tuple(chat),
            adapter=None if role.scripted else role.adapter_name, item=state.item, transcript=visible,
            metadata=MappingProxyType(dict(self.turn_metadata(state, turn))),
            expects="verdict" if turn.stage in self.verdict_stages else "answer",
            reply_prefix=self.reply_prefix(state, turn))

    def reply_prefix(self, state: ProtocolState, turn: TurnSpec) -> str:
        """Text the model's reply to ``turn`` starts with (the backend puts it after the assistant
        generation prompt; the reply keeps it). Default: the ``reply_prefix`` option if the
        protocol has one (``ReplyPrefixOptions``), else none."""
        return getattr(self.options, "reply_prefix", "")

    def __repr__(self) -> str:
        shown = {k: v for k, v in self.options.model_dump().items() if k != "controller"}
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in shown.items())})"


# ---- bases of protocols that share a rule --------------------------------------------------------

class AnyRoleTeam(Protocol):
    """Base of protocols whose team may use any role names, every agent playing the protocol's one
    part (``roles`` holds that one ``RoleSpec``; ``sequential``, ``split``).

    Agents act in team order (roles in the order given, instances by index); a role without a
    prompt gets the part's default prompt; the ``n_agents`` option, when set, must equal the team's
    size (``check_team_size``), whatever its roles are called.
    """

    def validate_team(self, team: Team) -> None:
        check_team_size(self, team, self.options.n_agents)

    def agent_order(self, team: Team) -> list[str]:
        return team.agent_ids()

    def system_prompt(self, role: Role) -> str:
        if role.prompt is not None:
            return role.prompt
        (part,) = self.roles
        assert part.prompt is not None, f"protocol {self.name!r}: its one role needs a default prompt"
        return part.prompt


class PluralityVote(Protocol):
    """Base of protocols whose team answer is a vote of the agents of ``voting_role`` (``vote``,
    ``debate``): each votes with the answer of its latest spoken message (``plurality_of_latest``:
    agents without an answer do not vote, ties go to the earliest agent), and
    ``Episode.metadata["votes"]`` records every voter's answer (None: no vote)."""

    #: the role whose agents vote
    voting_role: ClassVar[str]

    def voters(self, team: Team) -> list[str]:
        """The agents of ``voting_role``, by index."""
        return team.role(self.voting_role).agent_ids()

    def final_answer(self, state: ProtocolState) -> str | None:
        return plurality_of_latest(state, self.voters(state.team))

    def episode_metadata(self, state: ProtocolState) -> dict[str, Any]:
        return {"votes": {a: state.answer_of_latest(a) for a in self.voters(state.team)}}


# ---- helpers shared by protocols -----------------------------------------------------------------

def render_entry(message: Message, viewer: str) -> ChatMessage:
    """A transcript entry as ``viewer`` sees it: its own words as assistant, others' as user."""
    if message.agent == viewer:
        return ChatMessage("assistant", message.text)
    return ChatMessage("user", f"[{message.agent}, round {message.round + 1}]: {message.text}")


def rounds_of(schedule: Iterable[TurnSpec]) -> list[list[TurnSpec]]:
    """Group a schedule's turns by round, in order."""
    groups: list[list[TurnSpec]] = []
    for turn in schedule:
        if groups and groups[-1][0].round == turn.round:
            groups[-1].append(turn)
        else:
            groups.append([turn])
    return groups


def latest_per_agent(state: ProtocolState, agents: Iterable[str], before_round: int) -> list[Message]:
    """Each agent's latest spoken message from rounds before ``before_round``, oldest first."""
    found = [m for a in agents if (m := state.latest(a, before_round)) is not None]
    order = {id(m): i for i, m in enumerate(state.messages)}
    return sorted(found, key=lambda m: order[id(m)])


def plurality_of_latest(state: ProtocolState, agents: Sequence[str]) -> str | None:
    """Plurality (``teamplay.envs.voting.plurality``: most votes, ties to the earliest agent) over
    the answers of each agent's latest spoken message; agents without one do not vote."""
    return plurality([state.answer_of_latest(a) for a in agents])


def check_count_option(protocol: Protocol, team: Team, role: str, option: int | None) -> None:
    """Raise ``ConfigError`` when the ``n_agents`` option was set and the team disagrees."""
    if option is not None and team.role(role).count != option:
        raise ConfigError(f"protocol {protocol.name!r} option n_agents={option} but team role "
                          f"{role!r} has count {team.role(role).count}; set only one of them")


def check_team_size(protocol: Protocol, team: Team, option: int | None) -> None:
    """Raise ``ConfigError`` when the ``n_agents`` option was set and the team's size (agents of
    all its roles) disagrees: the check of protocols that take any role names."""
    size = len(team.agent_ids())
    if option is not None and size != option:
        raise ConfigError(f"protocol {protocol.name!r} option n_agents={option} but the team has "
                          f"{size} agents; set only one of them")


def _validate_options(protocol: str, model: type[ProtocolOptions],
                      options: Mapping[str, Any]) -> ProtocolOptions:
    try:
        return model(**options)
    except ValidationError as exc:
        err = exc.errors()[0]
        field_name = ".".join(str(p) for p in err["loc"]) or "options"
        if err["type"] == "extra_forbidden":
            known = ", ".join(model.model_fields) or "none"
            raise ConfigError(f"protocol {protocol!r}: unknown option {field_name!r} "
                              f"(known options: {known})") from None
        raise ConfigError(f"protocol {protocol!r} option {field_name!r}: {err['msg']} "
                          f"(got {err.get('input')!r})") from None


#: old names of this module -> their new names (both rules were called majority; now only the
#: more-than-half rule is): read for one release with one warning line, then refused
_RENAMED = {"majority_of_latest": "plurality_of_latest", "MajorityVote": "PluralityVote"}


def __getattr__(name: str) -> Any:
    if name in _RENAMED:
        warnings.warn(DeprecationWarning(f"teamplay.envs.protocols.base.{name} is now {_RENAMED[name]}; the old "
                                         f"name is read until the next release, then refused"), stacklevel=2)
        return globals()[_RENAMED[name]]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

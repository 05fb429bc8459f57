"""EpisodeDriver: runs one protocol through one episode, independent of any PettingZoo API.

``TeamEnv`` (AEC: one agent at a time) and ``TeamParallelEnv`` (all agents of a round at once) are
thin adapters over this driver, so both APIs produce the same episode for the same actions.

Planning: the driver walks the protocol's schedule round by round. A round the protocol declares
simultaneous is planned whole when it starts (every request built from the state at the start of
the round, every speak/skip decision made then); other rounds are planned one turn at a time, so a
turn sees the messages written before it in the same round. Skipped turns are recorded in schedule
order as ``Message(spoke=False, text="")`` and cost no call.

Controller decisions: every call of the protocol's controller adds one typed
``ControllerDecision`` to the episode's ``decisions``. A skipped turn whose choice asks for a
*counterfactual* stays pending: its request, marked ``metadata["counterfactual"] = True``, is
answered like any other turn (so a rollout runner batches it with the real turns of that step), but
the answer goes into the decision (``counterfactual_text``, ``counterfactual_tokens``), and the
transcript gets the usual skipped message. ``Episode.counterfactual_tokens`` sums those tokens;
``Episode.tokens`` and ``calls`` exclude them.

No channel (``channel=False``, the config's ``protocol.channel: false``): the control arm of a
hidden-information or review setting. Every request is built from the agent's *own view* of the
episode: a state in which every other agent's message is recorded as a skipped turn (``_skipped``),
so no other agent's text, answer or verdict reaches its prompt, its ``transcript`` or its metadata
(``pending_answer``); it sees the problem (its own view of it, as the protocol gives it), its role's
prompt and its own earlier messages. Only what agents are shown changes: the recorded transcript,
the final-answer rule and the reward use every message, and speak/skip rules (``may_skip``) read the
real state.

Cut messages (``Generation.cut``: generation stopped at ``max_new_tokens``): recorded with
``Message.cut``; with ``score_cut_messages=False`` (the config's ``protocol.score_cut_messages``)
their answer is None, so a reply cut mid-working is never graded by a number it happened to hold.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from teamplay.agents.roles import Team
from teamplay.envs.protocols.base import ControllerChoice, Protocol, ProtocolState, TurnDecision, TurnSpec
from teamplay.envs.tasks.base import Task
from teamplay.records import ChatMessage, ControllerDecision, Episode, Generation, Message, TaskItem, TurnRequest

#: a lone UTF-16 surrogate (no tokenizer decodes to one; a hand-written or random action may hold one)
SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """``text`` with lone UTF-16 surrogates replaced by U+FFFD (a surrogate pair is joined).

    No tokenizer decodes to a lone surrogate, but a hand-written or random action may contain one,
    and it would break every later UTF-8 write (logs, episode files) of the transcript.

    >>> clean_text("ok \\ud800!")
    'ok \\ufffd!'
    """
    if not SURROGATE.search(text):
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def render_chat(chat: Sequence[ChatMessage]) -> str:
    """Plain-text rendering of a chat (the AEC observation): ``[role]`` headers, blank-line separated."""
    return "\n\n".join(f"[{m.role}]\n{m.content}" for m in chat)


REMOVALS = ("skip", "null_message", "base_policy")
NULL_MESSAGE = "(no message)"


@dataclass(frozen=True)
class ReplaySpec:
    """Re-execute an episode from a recorded prefix, with some agents removed (counterfactual credit).

    Fields:
        prefix: messages of a recorded episode of the same problem and team, replayed verbatim (no
            generation, no controller call) as the first ``len(prefix)`` turns, shape [P]; each
            must match the schedule's turn (agent, stage, round).
        removed: agents whose turns after the prefix do not come from their policy.
        removal: what a removed agent's turn becomes: ``skip`` (recorded as a skipped turn: the
            protocol proceeds as if it had not spoken, see ``Protocol.skip_means``), ``null_message``
            (it says ``null_text``, costing no generation) or ``base_policy`` (its request goes to the
            base model, adapter ``None``).
        remove_next: also remove the first turn after the prefix, whoever's it is (leave-one-turn-out).
        null_text: the neutral text of ``null_message``.
    """

    prefix: tuple[Message, ...] = ()
    removed: frozenset[str] = frozenset()
    removal: str = "skip"
    remove_next: bool = False
    null_text: str = NULL_MESSAGE

    def __post_init__(self) -> None:
        if self.removal not in REMOVALS:
            raise ValueError(f"replay removal must be one of {REMOVALS}, got {self.removal!r}")


@dataclass(frozen=True)
class PlannedTurn:
    """A turn whose request is built; ``speak`` False means the controller skipped it.

    ``counterfactual`` (only when skipped): the turn is still answered, for the controller's log
    only. ``log_index``: this turn's entry in the decision log (None when no controller was asked).
    """

    turn: TurnSpec
    request: TurnRequest
    speak: bool = True
    counterfactual: bool = False
    log_index: int | None = None
    forced: Message | None = None

    @property
    def acts(self) -> bool:
        """Whether an agent must answer this turn (spoken or counterfactual; a replayed or
        removed turn is ``forced``: its message is known without asking anyone)."""
        return (self.speak or self.counterfactual) and self.forced is None

    @functools.cached_property
    def observation(self) -> str:
        return render_chat(self.request.chat)


@dataclass(frozen=True)
class EpisodeResult:
    """What the end of an episode decided (set once the last turn is recorded)."""

    final_answer: str | None
    initial_answer: str | None
    reward: float
    agent_answers: dict[str, str | None]
    agent_correct: dict[str, float]


class EpisodeDriver:
    """Drives ``protocol`` for ``team`` on items of ``task``; reusable across episodes via ``start``."""

    def __init__(self, protocol: Protocol, team: Team, task: Task, channel: bool = True,
                 score_cut_messages: bool = True) -> None:
        protocol.validate_team(team)
        self.channel = channel
        self.score_cut_messages = score_cut_messages
        self.protocol = protocol
        self.team = team
        self.task = task
        self.agents: tuple[str, ...] = tuple(protocol.agent_order(team))
        self.plan: tuple[TurnSpec, ...] = protocol.schedule(team)
        self._check_plan()
        protocol.check_task(task, team)
        self.rounds = 1 + max((t.round for t in self.plan), default=-1)
        self.state: ProtocolState | None = None
        self.group_id = ""
        self.result: EpisodeResult | None = None
        self._queue: list[PlannedTurn] = []
        self._next = 0
        self._initial: tuple[str | None] | None = None
        self._truncated: list[int] = []
        self._decisions: list[ControllerDecision] = []
        self._rng = np.random.default_rng()
        self._replay: ReplaySpec | None = None
        self._seed: int | None = None

    def _check_plan(self) -> None:
        known = set(self.agents)
        last_round = -1
        for i, turn in enumerate(self.plan):
            if turn.agent not in known or self.team.role_of(turn.agent).name != turn.role:
                raise ValueError(f"protocol {self.protocol.name!r}: schedule[{i}] names agent "
                                 f"{turn.agent!r} of role {turn.role!r}, not an agent of the team "
                                 f"{sorted(known)}")
            if turn.round < last_round:
                raise ValueError(f"protocol {self.protocol.name!r}: schedule[{i}] goes back from "
                                 f"round {last_round} to {turn.round}; rounds must not decrease")
            last_round = turn.round

    # ---- episode life -----------------------------------------------------------------------

    def start(self, item: TaskItem, group_id: str, rng: np.random.Generator, seed: int | None = None,
              replay: ReplaySpec | None = None) -> None:
        """Begin an episode on ``item``; ``rng`` is handed to controllers (seeded by the env) and
        ``seed`` (the episode's seed) to every request, for policies that vary per episode;
        ``replay`` re-executes a recorded prefix with agents removed (see ``ReplaySpec``)."""
        if replay is not None and len(replay.prefix) > len(self.plan):
            raise ValueError(f"replay prefix has {len(replay.prefix)} messages but the schedule has "
                             f"{len(self.plan)} turns")
        self._replay = replay
        self.state = self.protocol.new_state(item, self.team, self.task.answer_instruction)
        self.group_id = group_id
        self.result = None
        self._queue = []
        self._next = 0
        self._initial = None
        self._truncated = []
        self._decisions = []
        self._rng = rng
        self._seed = seed
        self._advance()

    @property
    def done(self) -> bool:
        return self.result is not None

    @property
    def pending(self) -> PlannedTurn | None:
        """The turn that must be answered next (None when the episode is over)."""
        return self._queue[0] if self._queue else None

    def pending_turns(self) -> tuple[PlannedTurn, ...]:
        """Every planned, not yet answered turn: the rest of the current round when it is
        simultaneous, else just the next turn."""
        return tuple(p for p in self._queue if p.acts)

    def submit(self, action: str | Generation | None) -> Message:
        """Record ``action`` as the pending turn's message and move on; returns the message."""
        if self.state is None:
            raise RuntimeError("EpisodeDriver.submit before start(); call reset() on the env first")
        planned = self.pending
        if planned is None:
            raise RuntimeError("the episode is over: no turn is pending")
        message = self._message(planned, action)
        if not planned.speak:  # a counterfactual answer: logged, not said
            assert planned.log_index is not None
            self._decisions[planned.log_index] = dataclasses.replace(
                self._decisions[planned.log_index], counterfactual_text=message.text,
                counterfactual_tokens=message.n_tokens, counterfactual_answer=message.answer)
            message = _skipped(planned.turn)
        elif isinstance(action, Generation) and action.truncated:
            self._truncated.append(len(self.state.messages))
        self._queue.pop(0)
        self._record(message)
        self._advance()
        return message

    # ---- internals --------------------------------------------------------------------------

    def _advance(self) -> None:
        """Plan turns until one must be answered, recording skipped ones; finish at the end."""
        assert self.state is not None
        while True:
            while self._queue and not self._queue[0].acts:
                planned = self._queue.pop(0)
                self._record(planned.forced if planned.forced is not None else _skipped(planned.turn))
            if self._queue:
                return
            if self._next >= len(self.plan):
                self._finish()
                return
            self._plan_next()

    def _plan_next(self) -> None:
        assert self.state is not None
        round_ = self.plan[self._next].round
        if round_ > 0 and self._initial is None:
            # round 0 is complete: what the final-answer rule says now is the initial answer
            self._initial = (self.protocol.final_answer(self.state),)
        end = self._next
        while end < len(self.plan) and self.plan[end].round == round_:
            end += 1
        turns = self.plan[self._next:end]
        if not self.protocol.simultaneous(self.team, turns):
            turns = turns[:1]
        self._next += len(turns)
        first = len(self.state.messages)  # the queue is empty here: every earlier turn is recorded
        self._queue = [self._planned(t, first + j) for j, t in enumerate(turns)]

    def _planned(self, turn: TurnSpec, index: int) -> PlannedTurn:
        """Plan ``turn``, the ``index``-th turn of the episode."""
        assert self.state is not None
        request = self._request(self.state, turn)
        if self._seed is not None:
            request = dataclasses.replace(request, seed=self._seed)
        replayed = self._replayed(turn, request, index)
        if replayed is not None:
            return replayed
        controller = self.protocol.controller
        if controller is None or not self.protocol.may_skip(self.state, turn):
            return PlannedTurn(turn=turn, request=request)
        choice = controller(TurnDecision(turn=turn, rounds=self.rounds, request=request, rng=self._rng))
        if not isinstance(choice, ControllerChoice):
            choice = ControllerChoice(speak=bool(choice))
        counterfactual = choice.counterfactual and not choice.speak
        self._decisions.append(choice.decision(turn))
        if counterfactual:
            request = dataclasses.replace(
                request, metadata=MappingProxyType({**request.metadata, "counterfactual": True}))
        return PlannedTurn(turn=turn, request=request, speak=choice.speak, counterfactual=counterfactual,
                           log_index=len(self._decisions) - 1)

    def _request(self, state: ProtocolState, turn: TurnSpec) -> TurnRequest:
        """The protocol's request for ``turn`` after ``state``; without a channel, built from the
        agent's own view of ``state`` (module docstring)."""
        return self.protocol.build_request(state if self.channel else self._own_view(state, turn.agent), turn)

    def _own_view(self, state: ProtocolState, agent: str) -> ProtocolState:
        """A fresh state holding ``state``'s messages with every other agent's turn skipped."""
        view = self.protocol.new_state(state.item, state.team, state.answer_instruction)
        for m in state.messages:
            seen = m if m.agent == agent else _skipped(TurnSpec(m.agent, m.role, m.stage, m.round))
            view.messages.append(seen)
            self.protocol.update(view, seen)
        return view

    def request_for(self, item: TaskItem, messages: Sequence[Message], index: int) -> TurnRequest:
        """The request the schedule's turn ``index`` gets in an episode of ``item`` whose messages
        are ``messages`` (recorded or edited; at least ``index`` of them), rebuilt in a fresh state:
        from the messages before ``index``, or before its round when the protocol plans that round
        whole, as the driver plans it. No controller is asked, nothing is generated, the driver's
        own episode is untouched. Scores what a listener reads with a message withheld
        (``influence`` credit)."""
        if not 0 <= index < len(self.plan) or len(messages) < index:
            raise ValueError(f"request_for: turn {index} of a {len(self.plan)}-turn schedule after "
                             f"{len(messages)} messages")
        turn = self.plan[index]
        first = next(i for i, t in enumerate(self.plan) if t.round == turn.round)
        whole = [t for t in self.plan if t.round == turn.round]
        upto = first if self.protocol.simultaneous(self.team, whole) else index
        state = self.protocol.new_state(item, self.team, self.task.answer_instruction)
        for m in messages[:upto]:
            state.messages.append(m)
            self.protocol.update(state, m)
        return self._request(state, turn)

    def _replayed(self, turn: TurnSpec, request: TurnRequest, index: int) -> PlannedTurn | None:
        """The planned turn a ``ReplaySpec`` dictates for turn ``index`` (None: an ordinary turn)."""
        spec = self._replay
        if spec is None:
            return None
        if index < len(spec.prefix):
            m = spec.prefix[index]
            if (m.agent, m.stage, m.round) != (turn.agent, turn.stage, turn.round):
                raise ValueError(f"replay prefix message {index} is {m.agent}/{m.stage}/round {m.round} "
                                 f"but the schedule's turn is {turn.agent}/{turn.stage}/round {turn.round}")
            return PlannedTurn(turn=turn, request=request, forced=m)
        removed = turn.agent in spec.removed or (spec.remove_next and index == len(spec.prefix))
        if not removed:
            return None
        if spec.removal == "skip":
            return PlannedTurn(turn=turn, request=request, forced=_skipped(turn))
        if spec.removal == "null_message":
            return PlannedTurn(turn=turn, request=request, forced=null_message(turn, self.task, spec.null_text))
        return PlannedTurn(turn=turn, request=dataclasses.replace(request, adapter=None))  # base_policy

    def _message(self, planned: PlannedTurn, action: Any) -> Message:
        turn, request = planned.turn, planned.request
        prompt_ids: tuple[int, ...] = ()
        completion_ids: tuple[int, ...] = ()
        logprobs: tuple[float, ...] = ()
        entropies: tuple[float, ...] = ()
        adapter = None
        if isinstance(action, Generation):
            if action.adapter is not None and action.adapter != request.adapter:
                raise ValueError(f"{turn.agent}: generation came from adapter {action.adapter!r} but "
                                 f"role {turn.role!r} writes with adapter {request.adapter!r}")
            text = clean_text(action.text)
            prompt_ids, completion_ids = tuple(action.prompt_ids), tuple(action.completion_ids)
            logprobs, adapter, entropies = tuple(action.logprobs), action.adapter, tuple(action.entropies)
        elif isinstance(action, str):
            text = clean_text(action)
        elif action is None:
            raise ValueError(f"{turn.agent} has a pending {turn.stage!r} turn: step() needs its text "
                             f"(str or Generation); None is only for terminated agents")
        else:
            raise TypeError(f"{turn.agent}: action must be a str or a Generation, "
                            f"got {type(action).__name__}")
        cut = isinstance(action, Generation) and action.cut
        # a cut text's last number is often a step of the working, not the answer ("3. 14 +")
        answer = None if cut and not self.score_cut_messages else self.task.extract(text)
        return Message(agent=turn.agent, role=turn.role, round=turn.round, stage=turn.stage,
                       text=text, prompt_ids=prompt_ids, completion_ids=completion_ids,
                       logprobs=logprobs, adapter=adapter, answer=answer, entropies=entropies, cut=cut)

    def _record(self, message: Message) -> None:
        assert self.state is not None
        self.state.messages.append(message)
        self.protocol.update(self.state, message)

    def _finish(self) -> None:
        assert self.state is not None
        final = self.protocol.final_answer(self.state)
        initial = self._initial[0] if self._initial is not None else final
        answers = {a: self.state.last_answer(a) for a in self.agents}
        reward, correct = self.protocol.outcome(self.state, self.task, final, answers)
        self.result = EpisodeResult(final_answer=final, initial_answer=initial, reward=reward,
                                    agent_answers=answers, agent_correct=correct)

    def decisions(self) -> tuple[ControllerDecision, ...]:
        """The controller decisions of the current episode so far."""
        return tuple(self._decisions)

    def episode(self) -> Episode:
        """The finished episode's record. Raises ``RuntimeError`` while turns remain."""
        if self.state is None or self.result is None:
            raise RuntimeError("episode() called before the episode finished: step every pending "
                               "turn first (env.agents becomes empty at the end)")
        messages = tuple(self.state.messages)
        metadata = {"protocol": self.protocol.name, "initial_answer": self.result.initial_answer,
                    "skipped": sum(not m.spoke for m in messages),
                    "truncated_turns": list(self._truncated)}
        if self._replay is not None:
            metadata["replay"] = {"prefix": len(self._replay.prefix), "removed": sorted(self._replay.removed),
                                  "removal": self._replay.removal, "remove_next": self._replay.remove_next}
        metadata.update(self.protocol.episode_metadata(self.state))
        return Episode(
            problem_id=self.state.item.id, group_id=self.group_id, agents=self.agents,
            messages=messages, final_answer=self.result.final_answer, reward=self.result.reward,
            agent_answers=self.result.agent_answers, agent_correct=self.result.agent_correct,
            tokens=sum(m.n_tokens for m in messages), calls=sum(m.spoke for m in messages),
            metadata=metadata, decisions=tuple(self._decisions))


def null_message(turn: TurnSpec | Message, task: Task, text: str = NULL_MESSAGE) -> Message:
    """What a withheld turn says: the neutral ``text`` in its author's place, with the answer the
    task reads in it (none for the default text), costing no generation."""
    return Message(agent=turn.agent, role=turn.role, round=turn.round, stage=turn.stage, text=text,
                   answer=task.extract(text))


def _skipped(turn: TurnSpec) -> Message:
    """The transcript record of a turn the controller skipped."""
    return Message(agent=turn.agent, role=turn.role, round=turn.round, stage=turn.stage, text="",
                   spoke=False)

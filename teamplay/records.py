"""The typed records every stage of teamplay passes on (the ground floor: imports nothing from teamplay).

Task item -> TeamEnv -> Episode (messages + team reward + controller decisions) -> credit -> trainer.
Generation requests and results (``TurnRequest``, ``SamplingParams``, ``Generation``) are what the
envs hand the generation backends and get back.

All records are frozen dataclasses: a stage never mutates what an earlier stage produced.
Token ids and log-probs are tuples so that records stay hashable and cheap to compare in tests.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any


def _frozen_mapping(data: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(data or {}))


@dataclass(frozen=True)
class TaskItem:
    """One problem of a task.

    Fields:
        id: stable identifier, unique within a task split (e.g. ``"gsm8k/test/17"``).
        prompt: the problem text shown to the team.
        reference: the gold answer in the task's canonical form (a number for gsm8k/arith,
            LaTeX for math, a letter A-D for gpqa).
        metadata: task-specific extras (level, subject, the shuffled choices, ...).
    """

    id: str
    prompt: str
    reference: str
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "metadata", _frozen_mapping(self.metadata))

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "prompt": self.prompt, "reference": self.reference,
                "metadata": dict(self.metadata)}


@dataclass(frozen=True)
class Message:
    """One turn of one agent in an episode.

    Fields:
        agent: the agent instance that wrote it (``"proposer_0"``).
        role: the role name of that agent (``"proposer"``).
        round: 0-based round index in the protocol's schedule.
        stage: what the turn was for (``"solve"``, ``"propose"``, ``"review"``, ``"revise"``, ...).
        text: the decoded completion ("" when the agent skipped).
        prompt_ids: token ids of the prompt the model saw, shape [P].
        completion_ids: token ids generated, shape [C] (empty for a skipped turn or scripted text).
        logprobs: behaviour log-probs of ``completion_ids`` under the generating policy, shape [C].
        adapter: name of the LoRA adapter that generated it (``None`` = base model / scripted).
        answer: the answer the task's extractor found in ``text`` (``None`` if none, and for a cut
            message unless the run scores cut messages: ``protocol.score_cut_messages``).
        spoke: False when a speak/skip controller chose to skip (then text is "" and no tokens).
        entropies: entropy (nats) of the distribution each completion token was sampled from,
            shape [C], when the backend recorded it at generation (see ``Generation.entropies``);
            empty otherwise. Token-level credit reads them instead of re-scoring the message.
        cut: generation stopped at ``max_new_tokens`` before the message ended (``Generation.cut``).
    """

    agent: str
    role: str
    round: int
    stage: str
    text: str
    prompt_ids: tuple[int, ...] = ()
    completion_ids: tuple[int, ...] = ()
    logprobs: tuple[float, ...] = ()
    adapter: str | None = None
    answer: str | None = None
    spoke: bool = True
    entropies: tuple[float, ...] = ()
    cut: bool = False

    def __post_init__(self) -> None:
        if len(self.completion_ids) != len(self.logprobs) and self.logprobs:
            raise ValueError(
                f"message of {self.agent}: {len(self.completion_ids)} completion ids but "
                f"{len(self.logprobs)} log-probs; there must be one log-prob per generated token"
            )
        if self.entropies and len(self.entropies) != len(self.completion_ids):
            raise ValueError(f"message of {self.agent}: {len(self.completion_ids)} completion ids but "
                             f"{len(self.entropies)} entropies; there must be one per generated token")

    @property
    def n_tokens(self) -> int:
        return len(self.completion_ids)

    def to_dict(self) -> dict[str, Any]:
        return {
            "agent": self.agent, "role": self.role, "round": self.round, "stage": self.stage,
            "text": self.text, "prompt_ids": list(self.prompt_ids),
            "completion_ids": list(self.completion_ids), "logprobs": list(self.logprobs),
            "adapter": self.adapter, "answer": self.answer, "spoke": self.spoke,
            **({"entropies": list(self.entropies)} if self.entropies else {}),
            **({"cut": True} if self.cut else {}),  # absent when false: logs written before read the same
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Message:
        return cls(
            agent=data["agent"], role=data["role"], round=int(data["round"]), stage=data["stage"],
            text=data["text"], prompt_ids=tuple(data.get("prompt_ids", ())),
            completion_ids=tuple(data.get("completion_ids", ())),
            logprobs=tuple(float(x) for x in data.get("logprobs", ())),
            adapter=data.get("adapter"), answer=data.get("answer"), spoke=bool(data.get("spoke", True)),
            entropies=tuple(float(x) for x in data.get("entropies", ())), cut=bool(data.get("cut", False)),
        )


@dataclass(frozen=True)
class Episode:
    """One team's work on one problem.

    Fields:
        problem_id: ``TaskItem.id`` of the problem.
        group_id: episodes sampled for the same problem in the same step share a group id.
        agents: every agent of the team, in the protocol's order (authors of messages are among them).
        messages: ordered transcript, shape [T].
        final_answer: the answer the protocol's final-answer rule chose (``None`` if none).
        reward: team reward in [0, 1]: the verifier's score of the final answer.
        agent_answers: each agent's last answer (``None`` if it never gave a parsable one).
        agent_correct: each agent's last answer scored by the verifier, in [0, 1].
        tokens: completion tokens generated in the episode (prompt tokens excluded).
        calls: model calls made (one per generated message; a skipped turn costs none).
        metadata: protocol-specific extras (votes, the initial answer, ...).
        decisions: the speak/skip controller decisions of the episode, in turn order (empty when
            no controller was asked).
    """

    problem_id: str
    group_id: str
    agents: tuple[str, ...]
    messages: tuple[Message, ...]
    final_answer: str | None
    reward: float
    agent_answers: Mapping[str, str | None] = field(default_factory=dict)
    agent_correct: Mapping[str, float] = field(default_factory=dict)
    tokens: int = 0
    calls: int = 0
    metadata: Mapping[str, Any] = field(default_factory=dict)
    decisions: tuple[ControllerDecision, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "decisions", tuple(self.decisions))
        object.__setattr__(self, "agent_answers", _frozen_mapping(self.agent_answers))
        object.__setattr__(self, "agent_correct", _frozen_mapping(self.agent_correct))
        object.__setattr__(self, "metadata", _frozen_mapping(self.metadata))
        unknown = {m.agent for m in self.messages} - set(self.agents)
        if unknown:
            raise ValueError(f"episode {self.problem_id}: messages by agents not in the team: {sorted(unknown)}")

    @property
    def counterfactual_tokens(self) -> int:
        """Tokens generated only to value skipped turns (not counted in ``tokens``)."""
        return sum(d.counterfactual_tokens for d in self.decisions)

    def messages_by(self, agent: str) -> list[int]:
        """Indices of ``agent``'s messages in ``messages``."""
        return [t for t, m in enumerate(self.messages) if m.agent == agent]

    def to_dict(self) -> dict[str, Any]:
        return {
            "problem_id": self.problem_id, "group_id": self.group_id, "agents": list(self.agents),
            "messages": [m.to_dict() for m in self.messages], "final_answer": self.final_answer,
            "reward": self.reward, "agent_answers": dict(self.agent_answers),
            "agent_correct": dict(self.agent_correct), "tokens": self.tokens, "calls": self.calls,
            "metadata": dict(self.metadata), "decisions": [d.to_dict() for d in self.decisions],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Episode:
        return cls(
            problem_id=data["problem_id"], group_id=data["group_id"], agents=tuple(data["agents"]),
            messages=tuple(Message.from_dict(m) for m in data["messages"]),
            final_answer=data.get("final_answer"), reward=float(data["reward"]),
            agent_answers=data.get("agent_answers", {}), agent_correct=data.get("agent_correct", {}),
            tokens=int(data.get("tokens", 0)), calls=int(data.get("calls", 0)),
            metadata=data.get("metadata", {}),
            decisions=tuple(ControllerDecision.from_dict(d) for d in data.get("decisions", ())),
        )


@dataclass(frozen=True)
class ChatMessage:
    """One chat-template message: ``role`` is ``"system"``, ``"user"`` or ``"assistant"``."""

    role: str
    content: str


@dataclass(frozen=True)
class TurnRequest:
    """What an agent must produce now.

    Fields:
        agent: agent instance (``"reviewer_0"``).
        role: its role name (``"reviewer"``).
        stage: what the turn is for (``"solve"``, ``"propose"``, ``"review"``, ...).
        round: 0-based round index.
        chat: the chat messages the model sees, oldest first; the last one is the instruction.
        adapter: LoRA adapter to generate with (``None`` = base model).
        item: the problem (scripted policies read ``item.reference``; models never see it).
        transcript: the messages visible to this agent (already in ``chat`` as text).
        metadata: protocol extras (e.g. the pending answer under review).
        expects: what the turn must produce: ``"answer"`` (a solution with an answer) or
            ``"verdict"`` (RIGHT/WRONG on the pending answer; the protocol's verdict stages).
        seed: the episode's seed (from ``reset(seed=...)``), so scripted policies can vary across
            the episodes of a group without hidden state; None when the env was not seeded.
        reply_prefix: text the reply starts with (e.g. ``"Verdict:"``). Model backends append its
            tokens to the prompt after the assistant generation prompt (prompt tokens, never
            generated or trained) and return ``prefix + completion`` as the text; scripted
            policies write their whole text themselves. ``""``: no prefix.
        row_seed: a random stream of this request's own for sampled decoding: a backend whose
            ``row_seeds`` is True draws this request's tokens from a generator seeded with it, so
            its completion does not depend on what else is in the call (up to the float rounding
            of its logits, as for greedy batching). None: the call's stream (``SamplingParams.seed``).
    """

    agent: str
    role: str
    stage: str
    round: int
    chat: tuple[ChatMessage, ...]
    adapter: str | None = None
    item: TaskItem | None = None
    transcript: tuple[Message, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)
    expects: str = "answer"
    seed: int | None = None
    reply_prefix: str = ""
    row_seed: int | None = None


@dataclass(frozen=True)
class SamplingParams:
    """Decoding settings shared by all backends.

    ``temperature == 0`` means greedy decoding. ``seed`` makes sampled generation reproducible for
    the same batch on the same backend. ``entropies`` asks for each token's sampling entropy
    (``Generation.entropies``; a full-vocabulary pass per token, so only when token-level credit
    reads them); a backend that cannot record them returns none.
    """

    max_new_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    entropies: bool = False

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def for_call(self, seed: int) -> SamplingParams:
        """These settings seeded for one generate call (``seed`` folded into 31 bits); greedy
        decoding draws nothing, so it is returned as it is."""
        return self if self.greedy else replace(self, seed=seed % (2**31 - 1))


@dataclass(frozen=True)
class Generation:
    """One completion.

    Fields:
        text: decoded completion (special tokens removed).
        prompt_ids: the prompt token ids, shape [P] (empty for scripted text).
        completion_ids: generated token ids, shape [C] (EOS included when generated).
        logprobs: log-prob of each completion token under the generating policy, shape [C],
            computed from the same (temperature-scaled) distribution that was sampled.
        adapter: adapter that generated it.
        truncated: the prompt was cut to fit the context (see ``teamplay.agents.prompts``).
        cut: the completion was cut: generation stopped at ``max_new_tokens`` before a stop token,
            so the text may end mid-sentence ("3. 14 +"); set by the model backends.
        entropies: entropy (nats) of that same sampled distribution at each completion token,
            shape [C]; recorded by backends that hold the full distribution while generating (HF),
            empty from those that do not (vLLM returns only sampled log-probs, scripted text).
    """

    text: str
    prompt_ids: tuple[int, ...] = ()
    completion_ids: tuple[int, ...] = ()
    logprobs: tuple[float, ...] = ()
    adapter: str | None = None
    truncated: bool = False
    entropies: tuple[float, ...] = ()
    cut: bool = False


@dataclass(frozen=True)
class ControllerDecision:
    """One speak/skip decision of a controller, logged in ``Episode.decisions`` by the driver.

    A renamed field is an ``AttributeError`` in the learner, never a silently empty lookup.

    Fields:
        agent, stage, round: the turn decided (``round`` 0-based).
        spoke: True when the agent spoke, False when the controller skipped its turn.
        state: the learner's information state (its table key); ``None`` when the controller does
            not decide this stage (the turn spoke and nothing is learned from it).
        mode: the controller mode that decided (``"train"``, ``"average_greedy"``, ...).
        pending_answer: the answer under review / the proposer's pending answer before the turn.
        previous_answer: the agent's own latest answer before the turn (debate).
        counterfactual_text: what a skipped agent would have said (training only; never in the
            transcript); ``None`` when no counterfactual was generated.
        counterfactual_answer: the answer extracted from ``counterfactual_text``.
        counterfactual_tokens: tokens generated for that counterfactual (not in ``Episode.tokens``).
        extra: JSON-ready facts of a user's own controller (built-in controllers leave it empty).
    """

    agent: str
    stage: str
    round: int
    spoke: bool
    state: tuple[str, ...] | None = None
    mode: str | None = None
    pending_answer: str | None = None
    previous_answer: str | None = None
    counterfactual_text: str | None = None
    counterfactual_answer: str | None = None
    counterfactual_tokens: int = 0
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.state is not None:
            object.__setattr__(self, "state", tuple(str(s) for s in self.state))
        object.__setattr__(self, "extra", _frozen_mapping(self.extra))

    @property
    def has_counterfactual(self) -> bool:
        return self.counterfactual_text is not None

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["state"] = None if self.state is None else list(self.state)
        data["extra"] = dict(self.extra)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ControllerDecision:
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"controller decision has unknown fields {sorted(unknown)}; known: {sorted(known)}")
        return cls(**{k: (tuple(v) if k == "state" and v is not None else v) for k, v in data.items()})


def derived_seed(*parts: object) -> int:
    """A 63-bit seed from ``parts`` (a hash of ``"p0/p1/..."``): streams keyed by different parts
    never share a seed, and none depends on how many numbers another stream drew."""
    digest = hashlib.sha256("/".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") & 0x7FFF_FFFF_FFFF_FFFF

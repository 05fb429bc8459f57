"""The generation interface every backend implements.

Callers (the RolloutRunner, the LLM judge of the credit layer) hand a backend a batch of
``TurnRequest``s and get one ``Generation`` per request, in order. A request carries the chat
messages (system prompt, visible transcript, instruction) and the adapter that should answer; the
backend builds the prompt with its own tokenizer and chat template (bounded, see
``teamplay.agents.prompts``), so a scripted backend needs no tokenizer and a vLLM backend can send
multi-LoRA requests without the callers changing.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from teamplay.envs.records import Message, TaskItem


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


@dataclass(frozen=True)
class SamplingParams:
    """Decoding settings shared by all backends.

    ``temperature == 0`` means greedy decoding. ``seed`` makes sampled generation reproducible for
    the same batch on the same backend.
    """

    max_new_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None

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
    """

    text: str
    prompt_ids: tuple[int, ...] = ()
    completion_ids: tuple[int, ...] = ()
    logprobs: tuple[float, ...] = ()
    adapter: str | None = None
    truncated: bool = False


class GenerationBackend(ABC):
    """Turns batches of ``TurnRequest``s into ``Generation``s (same order, same length)."""

    #: registry name (``"hf"``, ``"vllm"``, ``"scripted"``)
    name: str = ""

    @abstractmethod
    def generate(self, requests: Sequence[TurnRequest], sampling: SamplingParams) -> list[Generation]:
        """Generate one completion per request. Requests may use different adapters; the backend
        groups them as it needs (one batched call per adapter for ``hf``)."""

    def adapters(self) -> tuple[str, ...]:
        """Names of the LoRA adapters this backend can generate with (none by default)."""
        return ()

    def sync_adapters(self) -> None:
        """Make the next ``generate`` use the current adapter weights; the trainer calls it after each
        update. A no-op for backends that generate with the trained model itself (``hf``); a backend
        that holds its own copy of the weights (``vllm``) reloads the adapters."""
        return None  # hf and scripted generate with the current weights: nothing to reload

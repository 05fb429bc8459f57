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
from collections.abc import Sequence

from teamplay.records import Generation, SamplingParams, TurnRequest


class GenerationBackend(ABC):
    """Turns batches of ``TurnRequest``s into ``Generation``s (same order, same length)."""

    #: registry name (``"hf"``, ``"vllm"``, ``"scripted"``)
    name: str = ""
    #: whether ``generate`` draws a request that carries ``TurnRequest.row_seed`` from that seed's
    #: own stream, whatever else is in the call (a server can then batch seeded sampled requests)
    row_seeds: bool = False

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

    def close(self) -> None:
        """Free what the backend holds besides the model: a ``vllm`` engine's processes and KV cache.
        A no-op for backends that hold nothing more (``hf``, ``scripted``). Idempotent; whoever
        built the backend closes it (a trainer closes the one its run built, never one passed in)."""
        return None

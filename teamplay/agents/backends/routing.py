"""One backend per base model behind one interface: the backend of a heterogeneous team.

``RoutingBackend.generate`` splits a batch by the base that owns each request's adapter, hands
each part to that base's backend in one call, and returns the generations in request order. Each
base's backend builds prompts with its own tokenizer, so bases with different vocabularies mix.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from teamplay.agents.backends.base import GenerationBackend
from teamplay.errors import ConfigError
from teamplay.records import Generation, SamplingParams, TurnRequest


class RoutingBackend(GenerationBackend):
    """Routes requests to ``backends[owner[request.adapter]]``.

    Args:
        backends: base name -> the backend of that base.
        owner: adapter name -> base name.
    """

    name = "routing"

    def __init__(self, backends: Mapping[str, GenerationBackend], owner: Mapping[str, str]) -> None:
        self.backends = dict(backends)
        self.owner = dict(owner)
        missing = sorted(set(self.owner.values()) - set(self.backends))
        if missing:
            raise ConfigError(f"adapters are owned by bases without a backend: {missing}")

    @property
    def row_seeds(self) -> bool:
        return all(backend.row_seeds for backend in self.backends.values())

    def adapters(self) -> tuple[str, ...]:
        return tuple(self.owner)

    def generate(self, requests: Sequence[TurnRequest], sampling: SamplingParams) -> list[Generation]:
        by_base: dict[str, list[int]] = {}
        for i, r in enumerate(requests):
            if r.adapter is None or r.adapter not in self.owner:
                raise ConfigError(f"request of {r.agent} names adapter {r.adapter!r}; in a team with several "
                                  f"base models every turn names one of the adapters {list(self.owner)}")
            by_base.setdefault(self.owner[r.adapter], []).append(i)
        out: list[Generation | None] = [None] * len(requests)
        for base, members in by_base.items():
            for i, g in zip(members, self.backends[base].generate([requests[i] for i in members], sampling),
                            strict=True):
                out[i] = g
        return [g for g in out if g is not None]

    def sync_adapters(self) -> None:
        for backend in self.backends.values():
            backend.sync_adapters()

    def close(self) -> None:
        for backend in self.backends.values():
            backend.close()

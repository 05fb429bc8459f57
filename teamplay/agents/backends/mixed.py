"""A mixed team's backend: scripted roles answered by their policies, the others by the model.

``MixedBackend`` splits each batch of requests by role: requests of a role listed in ``scripted``
go to that role's ``ScriptedBackend`` (text only: no tokens, no log-probs, adapter ``None``), the
rest go to the model backend in one call, and the answers come back in request order. Because a
scripted message carries no completion tokens and no adapter, the trainer builds no sample from
it, so a scripted role is never optimised whatever the credit method gives it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from teamplay.agents.backends.base import GenerationBackend
from teamplay.agents.backends.scripted import ScriptedBackend
from teamplay.records import Generation, SamplingParams, TurnRequest


class MixedBackend(GenerationBackend):
    """Routes requests by role.

    Args:
        model: backend of the model-played roles (``None`` when every role is scripted).
        scripted: {role name: policy spec} (``"noisy_proposer(p_right=0.5)"``).
        seed: seed of the scripted policies' randomness.
    """

    name = "mixed"

    def __init__(self, model: GenerationBackend | None, scripted: Mapping[str, str], seed: int = 0) -> None:
        self.model = model
        self.scripted = {role: ScriptedBackend(spec, seed=seed) for role, spec in scripted.items()}

    def generate(self, requests: Sequence[TurnRequest], sampling: SamplingParams) -> list[Generation]:
        out: list[Generation | None] = [None] * len(requests)
        by_role: dict[str, list[int]] = {}
        for i, r in enumerate(requests):
            if r.role in self.scripted:
                by_role.setdefault(r.role, []).append(i)
        for role, idx in by_role.items():
            texts = self.scripted[role].generate([requests[i] for i in idx], sampling, positions=idx)
            for i, g in zip(idx, texts, strict=True):
                out[i] = Generation(text=g.text, adapter=None)
        rest = [i for i, g in enumerate(out) if g is None]
        if rest:
            if self.model is None:
                raise RuntimeError(f"request of {requests[rest[0]].agent}: its role is not scripted and this "
                                   f"team has no model backend")
            for i, g in zip(rest, self.model.generate([requests[i] for i in rest], sampling), strict=True):
                out[i] = g
        return [g for g in out if g is not None]

    @property
    def row_seeds(self) -> bool:
        # scripted policies key their randomness on a request's place in the batch
        return not self.scripted and self.model is not None and self.model.row_seeds

    def adapters(self) -> tuple[str, ...]:
        return self.model.adapters() if self.model is not None else ()

    def sync_adapters(self) -> None:
        if self.model is not None:
            self.model.sync_adapters()

    def close(self) -> None:
        if self.model is not None:
            self.model.close()

"""What an asynchronous run generates with in one process: a copy of the team model's adapters
and a backend over that copy (``CopyGeneration``, the ``rollouts.AheadGeneration`` of an hf or
vllm run; a Ray run's is ``teamplay.distributed.async_pool.PoolGeneration``).

hf: the generator's backend is a twin of the run's over the copy (``HFBackend.for_model``). Both
threads may generate at once, each with its own adapters over the shared frozen base, so held-out
evaluations run on the learner's thread with the learner's adapters, as in a synchronous run.

vllm: one engine serves both sides, and a vLLM engine is driven from one thread at a time. The
generator owns it: its view of the engine (``VLLMBackend.for_model``) serves the copy's adapters,
each loaded snapshot as new LoRA requests (a fresh adapter id per adapter and snapshot:
``lora_ids``), and the held-out evaluations, which use the run's own backend (the learner's
adapters, written after each update), are handed to the generator thread. Nothing else of the run
may generate with the engine while the generator runs (the config refuses what would). What a copy
cannot serve (another backend, a team over several bases) is refused before with the run's other
checks (``teamplay.training.wiring.checks.check_wired``).
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Mapping
from typing import Any

from teamplay.training.play.rollout import RolloutRunner
from teamplay.training.run.asynchronous.rollouts import AdapterTensors, Snapshot
from teamplay.training.wiring.checks import one_process_kind


def generation_copy(team_model):
    """A copy of ``team_model`` for the generator: its LoRA parameters are its own, the base weights
    and buffers are shared with ``team_model``. The base is frozen, so sharing it is safe; the copy's
    adapters change only when the generator loads a snapshot. The tokenizer is copied too: a fast
    tokenizer's settings are mutable state, not to be shared between threads."""
    lora = {id(p) for name in team_model.adapter_names for p in team_model.adapter_parameters(name)}
    shared = {id(t): t for t in itertools.chain(team_model.model.parameters(), team_model.model.buffers())
              if id(t) not in lora}
    return copy.deepcopy(team_model, shared)


class CopyGeneration:
    """The generator's copy of the run's adapters and a backend over it (see the module).

    Args:
        team_model: the learner's team model (one base model).
        backend: the run's generation backend over ``team_model``: ``HFBackend`` or ``VLLMBackend``.
        make_env, sampling, max_batch: the run's training envs, decoding and generate-call size.

    Attributes:
        lora_ids: vllm only: per loaded snapshot (by its step), adapter -> the LoRA id its batches
            were served with, in load order; a new id for every adapter of every snapshot.
    """

    def __init__(self, team_model, backend, make_env: Callable[[], Any], sampling, max_batch: int | None) -> None:
        kind = one_process_kind(backend)
        if hasattr(team_model, "part") or kind is None:  # a run's checks refused it already (``check_wired``)
            raise ValueError("CopyGeneration needs an hf or vllm backend over one base model")
        #: the run's ``VLLMBackend``, else None (hf)
        self.vllm = backend if kind == "vllm" else None
        self.team_model, self.run_backend = team_model, backend
        self.make_env, self.sampling, self.max_batch = make_env, sampling, max_batch
        # built with the generator's runner (its first batch), so a run that never steps holds no copy
        self.copy: Any = None
        self.backend: Any = None
        #: the vllm engine is the generator's: held-out evaluations must run on its thread
        self.evaluates_here = self.vllm is not None
        self.lora_ids: dict[int, dict[str, int]] = {}

    def weights(self) -> AdapterTensors:
        return AdapterTensors.of(self.team_model)

    def runner(self, before_generate: Callable[[], None]) -> RolloutRunner:
        if self.copy is None:
            self.copy = generation_copy(self.team_model)
            self.backend = self.run_backend.for_model(self.copy)
        return RolloutRunner(self.make_env, self.backend, self.sampling, max_batch=self.max_batch,
                             before_generate=before_generate)

    def load(self, snapshot: Snapshot) -> None:
        snapshot.weights.apply(self.copy)
        self.backend.sync_adapters()  # vllm: the copy's adapters as new LoRA requests; hf: nothing to do
        if self.vllm is not None:
            self.lora_ids[snapshot.step] = {a: r.lora_int_id for a, r in self.backend.served.items()}

    def batch_metrics(self) -> dict[str, Any]:
        return {}

    def step_metrics(self, runner_metrics: Mapping[str, Any]) -> dict[str, Any]:
        return dict(runner_metrics)

    def held_out(self, runner, sampling, before_generate: Callable[[], None] | None):
        """The run's own held-out source (the run's backend, the learner's adapters: a vllm
        backend writes them after each update); on the generator thread with vllm."""
        return runner.held_out(sampling, before_generate)

    def close(self) -> None:
        """Free the generator's backend (a vllm view's adapter folder; never the run's engine)."""
        if self.backend is not None:
            self.backend.close()

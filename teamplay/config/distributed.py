"""The ``distributed`` section: Ray scale-out of a single run (rollout workers, learner ranks)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from teamplay.config.base import Section
from teamplay.config.deprecated import renamed_key

#: Rollout-worker restarts one step allows (all workers together) unless ``max_restarts`` says
#: otherwise: enough to ride out a preempted node or an out-of-memory kill or two, few enough that
#: a worker that dies on every try fails the step instead of retrying forever.
DEFAULT_MAX_RESTARTS = 3


class WorkerResources(Section):
    """Ray resources of one worker (an actor)."""

    num_cpus: float = Field(1.0, ge=0.0, description="CPUs reserved per worker.")
    num_gpus: float = Field(0.0, ge=0.0, description="GPUs per worker (a fraction shares a GPU); "
                                                     "learner ranks with GPUs use NCCL, else gloo.")


class DistributedResources(Section):
    """Resources per rollout worker and per learner rank."""

    rollout: WorkerResources = Field(default_factory=WorkerResources, description="Per rollout worker.")
    learner: WorkerResources = Field(default_factory=WorkerResources, description="Per learner rank.")


class DistributedConfig(Section):
    """Scale-out on a Ray cluster (needs the `ray` extra): rollout workers and a data-parallel learner."""

    engine: Literal["ray"] = Field("ray", description="Distributed engine (ray).")
    address: str = Field("local", description="'local' starts a Ray cluster in this process; 'auto' "
                                              "joins the running one (ray start --head); or HOST:PORT.")
    local_cpus: int | None = Field(None, ge=1, description="CPUs of a 'local' cluster (None = all).")
    rollout_workers: int = Field(2, ge=1, description="Rollout workers per base model; each runs the "
                                                      "lock-step runner on its share of a step's jobs.")
    learner_workers: int = Field(1, ge=1, description="Data-parallel learner ranks (gloo on CPU, "
                                                      "NCCL on GPU).")
    learner_strategy: Literal["ddp", "fsdp"] = Field(
        "ddp", description="ddp: every learner rank holds the whole base; fsdp: FSDP2 shards the base and "
                           "the LoRA parameters over the ranks, per decoder layer (for a base that does not "
                           "fit one device; same adapters within float rounding).")
    max_worker_lag: int = Field(0, ge=0, description="Optimiser steps a rollout worker's adapters may lag "
                                                     "behind the learner's before it loads the latest (0 = "
                                                     "always the latest). Formerly max_staleness, a name "
                                                     "rollout.max_staleness (asynchronous rollouts) keeps.")
    max_restarts: int = Field(DEFAULT_MAX_RESTARTS, ge=0, description="Rollout-worker restarts allowed "
                                                                      "per step before the step fails.")
    resources: DistributedResources = Field(default_factory=DistributedResources,
                                            description="Ray resources per worker.")

    @model_validator(mode="before")
    @classmethod
    def _renamed_keys(cls, data: Any) -> Any:
        return renamed_key(data, "distributed", "max_staleness", "max_worker_lag")

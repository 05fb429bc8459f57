"""Where a team model goes: one rule per kind of process that builds one.

Every process that loads a team model says which kind it is (``Placement``) and asks
``model_device`` for the device; no caller reads ``model.device`` or probes for a GPU itself.

- ``IN_PROCESS``: the process generates and trains (or evaluates) with its own copy: a run without
  ``distributed:`` (a federated site's trainer too), the team of ``eval``, ``play`` and ``serve``,
  and the federated server. The model goes where ``model.device`` says (``resolve_device``).
- ``CLUSTER_DRIVER``: the driver of a ``distributed:`` run. Its copy serves credit and checkpoints
  and stays on the CPU: the GPUs are the workers'.
- ``RAY_LEARNER``: a learner rank, a Ray actor. The GPU Ray gave it (the only one torch sees in the
  actor), else the CPU; ``model.device`` is not read there, ``distributed.resources`` decides.
- ``RAY_ROLLOUT``: a rollout worker, a Ray actor. As a learner rank when it generates with ``hf``;
  with any other backend the team model only holds the adapters and stays on the CPU (a vLLM
  engine loads its own copy of the base onto the GPU, a scripted backend needs none).
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING

from teamplay.config import DistributedConfig, ModelConfig
from teamplay.errors import ConfigError

if TYPE_CHECKING:
    import torch


class Placement(Enum):
    """The kind of process a team model is built in (module doc: the rule of each)."""

    IN_PROCESS = "in_process"
    CLUSTER_DRIVER = "cluster_driver"
    RAY_LEARNER = "ray_learner"
    RAY_ROLLOUT = "ray_rollout"


def driver_placement(distributed: DistributedConfig | None) -> Placement:
    """The placement of a training run's driver: ``CLUSTER_DRIVER`` under ``distributed:``, else
    ``IN_PROCESS``."""
    return Placement.IN_PROCESS if distributed is None else Placement.CLUSTER_DRIVER


def model_device(where: Placement, model: ModelConfig, backend: str = "hf") -> torch.device | None:
    """The device a team model built at ``where`` goes to (None: it stays on the CPU, where it loads).

    ``backend`` (the generation backend's name) matters only for ``RAY_ROLLOUT``. ``IN_PROCESS``
    raises ``resolve_device``'s ConfigError for a GPU torch cannot see.
    """
    import torch

    if where is Placement.IN_PROCESS:
        return resolve_device(model.device)
    if where is Placement.CLUSTER_DRIVER:
        return None
    if where is Placement.RAY_ROLLOUT and backend != "hf":
        return None
    # a Ray actor sees only the GPUs Ray gave it: one when its resources ask for one, else none
    return torch.device("cuda") if torch.cuda.is_available() else None


def resolve_device(spec: str) -> torch.device:
    """The ``torch.device`` of a ``model.device`` value; ``ConfigError`` for a GPU torch cannot see."""
    import torch

    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(spec)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"model.device: {spec} asked for, but this torch ({torch.__version__}) sees no "
                              f"GPU; use model.device=auto or cpu")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(f"model.device: {spec} asked for, but torch sees {torch.cuda.device_count()} GPU(s)")
    return device

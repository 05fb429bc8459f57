"""The composition root: every entry point that trains (``teamplay train``, both sweep modes, the
federated site and server, the benchmarks) builds its trainer here, so ``distributed:`` and
``model.device`` mean the same whichever way a run is started.

``make_trainer(cfg, ...)`` is ``Trainer(cfg, ...)`` with the parts the config asks for: in-process
(``teamplay.training.run.local_parts.local_parts``) without ``distributed:``, a Ray rollout pool and learner
group (``teamplay.distributed.parts.ray_parts``) with it.
"""

from __future__ import annotations

from typing import Any

from teamplay.config import DistributedConfig, TrainConfig
from teamplay.training.run.local_parts import local_parts
from teamplay.training.run.parts import PartsFactory
from teamplay.training.run.trainer import Trainer


def parts_for(distributed: DistributedConfig | None) -> PartsFactory:
    """The runner and learner of a run whose ``distributed:`` section is ``distributed`` (None: the
    in-process pair)."""
    if distributed is None:
        return local_parts
    from teamplay.distributed.parts import ray_parts  # imports Ray only for a distributed run

    return ray_parts


def make_trainer(cfg: TrainConfig, **kwargs: Any) -> Trainer:
    """A ``Trainer`` for ``cfg`` with the parts it asks for; ``kwargs`` as ``Trainer`` takes them
    (``team_model``, ``backend``, ``task``, ``items``, ``eval_items``, ``on_step``, ``on_eval``)."""
    return Trainer(cfg, parts=parts_for(cfg.distributed), **kwargs)

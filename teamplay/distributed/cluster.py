"""Connecting to the Ray cluster a run uses.

``address: local`` starts a single-node cluster inside this process (tests, a laptop, one GPU
box); ``auto`` joins the cluster started on this node with ``ray start --head``; ``HOST:PORT``
joins a remote head. If the process is already connected (a test session's cluster, a Ray job),
that connection is used as is.
"""

from __future__ import annotations

from typing import Any

from teamplay.config import DistributedConfig
from teamplay.errors import ConfigError
from teamplay.registry import user_modules


def import_ray() -> Any:
    """The ``ray`` module, or a ConfigError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ConfigError("distributed.engine: ray is not installed; install the extra: "
                          "pip install 'teamplay[ray]'") from None
    return ray


def ship_user_code() -> None:
    """Make Ray pickle the classes and functions of users' files (tasks, protocols, credit methods
    loaded from ``file.py:name``) by value: a worker process never imported those files, and could
    not import the module they live in by its name."""
    pickler = import_ray().cloudpickle
    for module in user_modules():
        pickler.register_pickle_by_value(module)


def connect(cfg: DistributedConfig) -> bool:
    """Connect to the cluster ``cfg.address`` names; True when this call started the connection
    (the caller then owns it and shuts it down), False when one was already open."""
    ray = import_ray()
    if ray.is_initialized():
        return False
    # local_cpus with another address was refused with the run's checks (``wiring.checks.check_combinations``)
    kwargs: dict[str, Any] = dict(include_dashboard=False, log_to_driver=False,
                                  logging_level="WARNING", configure_logging=True)
    if cfg.address == "local":
        kwargs["num_cpus"] = cfg.local_cpus
    else:
        kwargs["address"] = cfg.address
    try:
        ray.init(**kwargs)
    except ConnectionError as exc:
        raise ConfigError(f"distributed.address: could not connect to a Ray cluster at {cfg.address!r} "
                          f"({exc}); start one with `ray start --head` or use address: local") from None
    return True


def check_capacity(cfg: DistributedConfig, groups: int) -> None:
    """Refuse a run whose workers can never all be scheduled (Ray would wait forever)."""
    ray = import_ray()
    total = ray.cluster_resources()
    need_cpu = (groups * cfg.rollout_workers * cfg.resources.rollout.num_cpus
                + cfg.learner_workers * cfg.resources.learner.num_cpus)
    need_gpu = (groups * cfg.rollout_workers * cfg.resources.rollout.num_gpus
                + cfg.learner_workers * cfg.resources.learner.num_gpus)
    have_cpu, have_gpu = total.get("CPU", 0.0), total.get("GPU", 0.0)
    if need_cpu > have_cpu or need_gpu > have_gpu:
        raise ConfigError(
            f"distributed: the workers need {need_cpu:g} CPUs and {need_gpu:g} GPUs "
            f"({groups} base model group(s) x {cfg.rollout_workers} rollout workers + "
            f"{cfg.learner_workers} learner ranks) but the cluster has {have_cpu:g} CPUs and {have_gpu:g} "
            f"GPUs; lower distributed.rollout_workers / learner_workers or distributed.resources")

"""``teamplay federate``: the server and K sites in Flower's simulation engine on this machine.

The ServerApp and ClientApp are the same in deployment (SuperLink and SuperNodes on separate
machines, see docs/how-to/federated.md); only this launcher is simulation-specific. Sites run as Ray actors of
``federated.client_cpus`` CPUs each, the server in this process (in a thread of Flower's).

SIGTERM and SIGINT: this launcher installs the preemption handlers in the main thread, from the
model loading on (``teamplay.training.run.preemption``); the server, in Flower's thread, reads the same
flag (``FederatedServer.run``), stops at its next safe point and raises ``Preempted``, which ends the
simulation and comes out of ``run_federated``. Ray is started here, before the simulation, because
``ray.init`` replaces the process's SIGTERM handler with one that exits at once (a SIGTERM during
``ray.init`` itself still meets that one).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from teamplay.config import FederatedConfig, FederatedSection
from teamplay.federated.client import make_client_app
from teamplay.federated.server import FederatedServer
from teamplay.training.run.preemption import preemption_handlers


def run_federated(cfg: FederatedConfig, resume: str | None = None, on_round=None) -> FederatedServer:
    """Run (or resume) a federated run to ``federated.rounds``; returns the server (global team).

    Config errors (a bad task, more sites than problems) surface here, before Ray starts: the
    server partitions the training pool when it is built. SIGTERM or SIGINT: ``Preempted`` after
    the last completed round, or ``Interrupted`` on a second signal (module doc).
    """
    from teamplay.training.wiring.checks import check_run

    check_run(cfg)  # task, protocol, credit method and its resources, before any data or model
    # a round under way is abandoned, unless it is past its evaluation (module doc)
    with preemption_handlers("after the last completed round (its checkpoint is written)") as preemption:
        server = FederatedServer(cfg, resume=resume, on_round=on_round)
        if preemption.requested:  # while the model loaded: stop before Ray starts
            raise server.preempted(preemption.signum)
        _simulate(server, cfg.federated)
    return server


def _simulate(server: FederatedServer, fed: FederatedSection) -> None:
    """Run ``server`` and ``fed.clients`` sites in Flower's simulation engine, each site an actor
    of ``fed.client_cpus`` CPUs."""
    from flwr.app import Context
    from flwr.serverapp import ServerApp
    from flwr.simulation import run_simulation

    errors: list[BaseException] = []
    server_app = ServerApp()

    @server_app.main()
    def main(grid, context: Context) -> None:
        try:
            server.run(grid)
        except BaseException as exc:  # re-raised below, outside Flower's runner, which only logs it
            errors.append(exc)
            raise

    cpus = os.cpu_count() or 1
    backend_config = {
        "client_resources": {"num_cpus": fed.client_cpus, "num_gpus": 0.0},
        "init_args": {"num_cpus": max(cpus, int(fed.client_cpus)), "include_dashboard": False,
                      "logging_level": logging.WARNING, "log_to_driver": True},
    }
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning)
        with _ray_started(backend_config):
            run_simulation(server_app, make_client_app(), num_supernodes=fed.clients,
                           backend_config=backend_config)
    if errors:
        raise errors[0]


@contextmanager
def _ray_started(backend_config: dict[str, Any]) -> Iterator[None]:
    """Ray started now, by Flower's own backend class with the simulation's config (the simulation
    then finds it running), with this process's SIGTERM handler put back after ``ray.init`` replaced
    it; shut down on the way out (the simulation's end shuts it down too, a failed start does not)."""
    import ray
    from flwr.server.superlink.fleet.vce.backend.raybackend import RayBackend

    handler = signal.getsignal(signal.SIGTERM)
    try:
        RayBackend(backend_config)  # ray.init only: the actors come from the simulation
        if handler is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, handler)
        yield
    finally:
        ray.shutdown()

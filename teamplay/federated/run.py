"""``teamplay federate``: the server and K sites in Flower's simulation engine on this machine.

The ServerApp and ClientApp are the same in deployment (SuperLink and SuperNodes on separate
machines, see the README); only this launcher is simulation-specific. Sites run as Ray actors of
``federated.client_cpus`` CPUs each, the server in this process.
"""

from __future__ import annotations

import logging
import os
import warnings

from teamplay.config import FederatedConfig
from teamplay.federated.client import make_client_app
from teamplay.federated.server import FederatedServer


def run_federated(cfg: FederatedConfig, resume: str | None = None, on_round=None) -> FederatedServer:
    """Run (or resume) a federated run to ``federated.rounds``; returns the server (global team).

    Config errors (a bad task, more sites than problems) surface here, before Ray starts: the
    server partitions the training pool when it is built.
    """
    from flwr.app import Context
    from flwr.serverapp import ServerApp
    from flwr.simulation import run_simulation

    from teamplay.training.setup import validate_run

    validate_run(cfg)  # task, protocol, credit method and its resources, before any data or model
    server = FederatedServer(cfg, resume=resume, on_round=on_round)
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
        "client_resources": {"num_cpus": cfg.federated.client_cpus, "num_gpus": 0.0},
        "init_args": {"num_cpus": max(cpus, int(cfg.federated.client_cpus)), "include_dashboard": False,
                      "logging_level": logging.WARNING, "log_to_driver": True},
    }
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning)
        run_simulation(server_app, make_client_app(), num_supernodes=cfg.federated.clients,
                       backend_config=backend_config)
    if errors:
        raise errors[0]
    return server

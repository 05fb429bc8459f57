"""Module-level Flower apps for deployment mode (a SuperLink and SuperNodes on separate machines).

A Flower app project names them in its ``pyproject.toml``:

    [tool.flwr.app.components]
    serverapp = "teamplay.federated.apps:server_app"
    clientapp = "teamplay.federated.apps:client_app"

    [tool.flwr.app.config]
    config = "configs/federated_demo.yaml"   # read on the machine that runs the ServerApp
    resume = ""                              # "auto": continue after the last completed round

Each SuperNode passes its site index and state folder as node config
(``--node-config "partition-id=0 state-dir='/data/teamplay-site'"``). The site's config comes from
the server with every round, so a site needs teamplay and its data, not the YAML file.
"""

from __future__ import annotations

from flwr.app import Context
from flwr.serverapp import ServerApp

from teamplay.config import FederatedConfig, load_config
from teamplay.federated.client import make_client_app
from teamplay.federated.server import FederatedServer

client_app = make_client_app()
server_app = ServerApp()


@server_app.main()
def main(grid, context: Context) -> None:
    """Load the run config named in the run config ``config`` and run every round."""
    cfg = load_config(FederatedConfig, str(context.run_config["config"]))
    resume = str(context.run_config.get("resume", "")) or None
    FederatedServer(cfg, resume=resume).run(grid)

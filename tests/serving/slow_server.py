"""A ``teamplay serve`` process with a slow scripted team, for the shutdown and fault tests.

    python -m tests.serving.slow_server TURN_S DRAIN_S [PROTOCOL]

Each model call sleeps ``TURN_S`` seconds and answers ``The answer is 1.``; the server drains for
at most ``DRAIN_S`` seconds at SIGTERM. It prints its URL when ready, and at exit
``exited after N model calls``.
"""

from __future__ import annotations

import sys
import time

from teamplay.agents.backends.scripted import ScriptedBackend
from teamplay.config import EvalConfig, build_config
from teamplay.serving.api.server import ServeLimits, create_app, serve
from teamplay.serving.episodes.engine import TeamEngine
from teamplay.training.wiring.envs import env_factory, load_items
from teamplay.training.wiring.sampling import sampling_params


def main(turn_s: float, drain_s: float, protocol: str = "single") -> None:
    options = {"rounds": 3} if protocol == "proposer_reviewer" else {}  # propose, review, propose
    cfg = build_config(EvalConfig, {"task": {"name": "arith", "limit": 3},
                                    "protocol": {"name": protocol, "options": options}})
    task, items = load_items(cfg.task)
    make_env, _ = env_factory(task, cfg.protocol, None)
    calls = []

    def slow(request) -> str:
        calls.append(request.agent)
        time.sleep(turn_s)
        return "The answer is 1."

    engine = TeamEngine(task, items, make_env, ScriptedBackend(slow), sampling_params(cfg.sampling), protocol)
    app = create_app(engine, "slow", ServeLimits(drain_s=drain_s))
    serve(app, "127.0.0.1", 0, on_ready=lambda url: print(url, flush=True))
    print(f"exited after {len(calls)} model calls", flush=True)


if __name__ == "__main__":
    main(float(sys.argv[1]), float(sys.argv[2]), *sys.argv[3:])

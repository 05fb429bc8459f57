"""Environments: tasks, the Episode/Message records, protocols and the PettingZoo team envs.

``TeamEnv``, ``TeamParallelEnv``, ``parallel_team_env``, ``get_protocol`` and ``protocol_names``
are imported lazily (PEP 562): importing ``teamplay.envs.records`` alone, as every stage does,
must not pull in PettingZoo and gymnasium.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "TeamEnv": "teamplay.envs.team_env",
    "UnicodeText": "teamplay.envs.team_env",
    "TeamParallelEnv": "teamplay.envs.parallel",
    "parallel_team_env": "teamplay.envs.parallel",
    "get_protocol": "teamplay.envs.protocols",
    "protocol_names": "teamplay.envs.protocols",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'teamplay.envs' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)

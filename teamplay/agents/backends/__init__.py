"""Generation backends behind one interface (``base.GenerationBackend``), looked up by name.

``get_backend("hf", team_model=..., max_prompt_tokens=...)``, ``get_backend("vllm", team_model=...)``,
``get_backend("scripted", policy="oracle")``. Backends are imported on first use, so the scripted
backend needs neither torch nor transformers and the vllm one imports vLLM only when built.
"""

from __future__ import annotations

import importlib
from typing import Any

from teamplay.agents.backends.base import GenerationBackend
from teamplay.errors import ConfigError

#: backend name -> "module:class"
BACKENDS: dict[str, str] = {
    "hf": "teamplay.agents.backends.hf:HFBackend",
    "vllm": "teamplay.agents.backends.vllm:VLLMBackend",
    "scripted": "teamplay.agents.backends.scripted:ScriptedBackend",
}


def get_backend(name: str, **kwargs: Any) -> GenerationBackend:
    """Build backend ``name`` with ``kwargs`` (its constructor's arguments).

    Raises ConfigError for an unknown name, listing the known ones.
    """
    if name not in BACKENDS:
        raise ConfigError(f"backend.name: unknown backend {name!r}; known: {sorted(BACKENDS)}")
    module, cls = BACKENDS[name].split(":")
    return getattr(importlib.import_module(module), cls)(**kwargs)

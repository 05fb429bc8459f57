"""Generation backends behind one interface (``base.GenerationBackend``), looked up by name.

``get_backend("hf", team_model=..., max_prompt_tokens=...)``, ``get_backend("vllm", team_model=...)``,
``get_backend("scripted", policy="truthful")``. Backends are imported on first use, so the scripted
backend needs neither torch nor transformers and the vllm one imports vLLM only when built.
"""

from __future__ import annotations

from typing import Any

from teamplay.agents.backends.base import GenerationBackend
from teamplay.registry import Registry

#: backends by name, imported on first use (vLLM only where it is built)
BACKENDS: Registry[type[GenerationBackend]] = Registry("backend", "backend.name")
BACKENDS.add_lazy("hf", "teamplay.agents.backends.hf:HFBackend")
BACKENDS.add_lazy("vllm", "teamplay.agents.backends.vllm:VLLMBackend")
BACKENDS.add_lazy("scripted", "teamplay.agents.backends.scripted:ScriptedBackend")


def get_backend(name: str, **kwargs: Any) -> GenerationBackend:
    """Build backend ``name`` with ``kwargs`` (its constructor's arguments).

    Raises ConfigError for an unknown name, listing the known ones.
    """
    return BACKENDS.get(name)(**kwargs)

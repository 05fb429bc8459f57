"""The docs site's own Python modules (``docs/*.py``: the page generators, hooks, captions), loaded
by file path for the tests: ``docs/`` is not a package."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

DOCS = Path(__file__).resolve().parents[2] / "docs"


def load_docs_module(name: str) -> ModuleType:
    """``docs/<name>.py``, executed afresh as the module ``name``."""
    spec = importlib.util.spec_from_file_location(name, DOCS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

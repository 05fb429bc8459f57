"""Where the shared benchmark files are, and a skip marker for when they are absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# the folder ../shared/data next to the repository (see its README.md), or the folder named by
# TEAMPLAY_DATA (a checkout elsewhere); tests never copy it
DATA = Path(os.environ.get("TEAMPLAY_DATA") or Path(__file__).resolve().parents[2] / ".." / "shared" / "data")


def data_file(relative: str) -> Path:
    """Path of a shared benchmark file; skips the calling test (with the path) when it is absent."""
    path = DATA / relative
    if not path.is_file():
        pytest.skip(f"benchmark file {path} is absent (the shared data folder is not next to the repo)")
    return path

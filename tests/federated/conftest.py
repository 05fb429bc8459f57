"""Fixtures of the federated tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def flower_identity(monkeypatch):
    """What Flower's runtime sets before a ServerApp runs (``Message()`` reads it), for tests that
    drive the server through ``tests.federated.fakes.FakeGrid`` instead of Flower's simulation."""
    from flwr.supercore.task_identity import TaskIdentity

    for name, value in (("_run_id", 1), ("_node_id", 0), ("_task_id", 1)):
        monkeypatch.setattr(TaskIdentity, name, value)

"""The PettingZoo conformance matrix: which protocols are checked, on which task, and the check.

The matrix is built from the protocol registry, so a protocol registered by importing
``teamplay.envs.protocols`` (a new module in ``catalog/``) is checked without editing a list; the two
example user protocols of ``configs/protocols/`` (a YAML and a Python file) join it by path.
``check_conformance`` is what every entry runs: PettingZoo's ``api_test`` and ``seed_test`` on the
AEC env and, where the protocol's default team plays simultaneous rounds (``supports_parallel``),
``parallel_api_test`` and ``parallel_seed_test``; elsewhere the Parallel API is refused in one line.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from pettingzoo.test import api_test, parallel_api_test, seed_test
from pettingzoo.test.seed_test import parallel_seed_test

from teamplay.envs.parallel import parallel_team_env
from teamplay.envs.protocols import get_protocol, protocol_names
from teamplay.envs.tasks import get_task
from teamplay.envs.tasks.base import Task
from teamplay.envs.team_env import TeamEnv
from teamplay.errors import ConfigError
from teamplay.records import TaskItem
from tests.envs.fakes import ITEMS, PYTHON_EXAMPLE, YAML_EXAMPLE, FakeTask


def matrix() -> list[str]:
    """Every registered protocol, then the example YAML and Python protocols (by path)."""
    return [*protocol_names(), YAML_EXAMPLE, PYTHON_EXAMPLE]


def matrix_id(name: str) -> str:
    """A short test id: the name, or a file's name."""
    return name.rsplit("/", 1)[-1]


def task_for(name: str, options: Mapping[str, Any] | None = None) -> tuple[Task, list[TaskItem]]:
    """The task the protocol's default team plays (its ``example_task``, else ``FakeTask``) and six
    items of it."""
    example = getattr(type(get_protocol(name, **dict(options or {}))), "example_task", None)
    if example is None:
        return FakeTask(), list(ITEMS)
    task = get_task(example)
    return task, task.load("test", limit=6)


def check_conformance(name: str, options: Mapping[str, Any] | None = None) -> None:
    """PettingZoo's checkers on protocol ``name`` with ``options`` (module docstring)."""
    options = dict(options or {})
    task, items = task_for(name, options)

    def aec() -> TeamEnv:
        return TeamEnv(task, name, items=items, protocol_options=options)

    api_test(aec(), num_cycles=20)
    seed_test(aec, num_cycles=20)
    protocol = get_protocol(name, **options)
    if not protocol.supports_parallel(protocol.default_team()):
        with pytest.raises(ConfigError, match="simultaneous rounds"):
            parallel_team_env(task, name, items=items, protocol_options=options)
        return

    def parallel():
        return parallel_team_env(task, name, items=items, protocol_options=options)

    parallel_api_test(parallel(), num_cycles=20)
    parallel_seed_test(parallel)

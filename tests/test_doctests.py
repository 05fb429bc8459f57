"""The examples in every teamplay module's docstrings run as tests (tasks have their own list,
which also checks that each of those modules keeps its examples)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import teamplay

MODULES = sorted(
    m.name for m in pkgutil.walk_packages(teamplay.__path__, prefix="teamplay.")
    if not m.name.startswith("teamplay.envs.tasks")
)


def test_modules_are_found():
    assert {"teamplay.envs.voting", "teamplay.training.play.regret", "teamplay.training.run.trainer"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0

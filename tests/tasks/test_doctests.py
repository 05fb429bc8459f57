"""The examples in the task modules' docstrings are tests too."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["answers.text", "answers.latex", "answers.numeric", "answers.letters", "catalog.gsm8k", "catalog.math_tasks",
           "catalog.gpqa", "catalog.arith", "__init__"]


@pytest.mark.parametrize("module", MODULES)
def test_doctests(module: str) -> None:
    name = "teamplay.envs.tasks" + ("" if module == "__init__" else f".{module}")
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
    assert result.attempted > 0  # every module listed has examples; none may silently lose them

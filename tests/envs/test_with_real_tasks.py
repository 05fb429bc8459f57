"""TeamEnv with the real procedural ``arith`` task (no download), and the modules' doctests."""

from __future__ import annotations

import doctest

import pytest
from pettingzoo.test import api_test

from teamplay.envs.protocols import driver, verdicts
from teamplay.envs.team_env import TeamEnv
from tests.envs.fakes import ALL_PROTOCOLS, always_wrong, play, truthful

tasks = pytest.importorskip("teamplay.envs.tasks", reason="the task package is not importable")


@pytest.fixture(scope="module")
def arith():
    task = tasks.get_task("arith")
    return task, task.load(limit=4)


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("name", ALL_PROTOCOLS)
def test_arith_oracle_wrong_and_api(arith, name):
    task, items = arith
    for item in items:
        assert play(TeamEnv(task, name, items=items), truthful, item=item).reward == 1.0
        assert play(TeamEnv(task, name, items=items), always_wrong, item=item).reward == 0.0
    api_test(TeamEnv(task, name, items=items), num_cycles=10)


@pytest.mark.parametrize("module", [driver, verdicts])
def test_doctests(module):
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0
